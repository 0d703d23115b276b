/**
 * mcore4j's own CUDA kernels: CUDA C sources shipped as resources, compiled at run time for the
 * device's architecture by NVRTC ({@link io.mcore4j.cuda.RuntimeCompiledModule}) and launched through
 * the driver API on the legacy default stream, the stream of DJL's libtorch ops. Each kernel
 * implements an interface of core's {@code io.mcore4j.core.kernel} package and is registered as its
 * service, so CPU-only modules use it without depending on CUDA. {@link io.mcore4j.cuda.DevicePointers}
 * gives the device address of a DJL tensor, to these kernels and to the NCCL backend ({@code mcore4j-nccl}).
 */
package io.mcore4j.cuda;
