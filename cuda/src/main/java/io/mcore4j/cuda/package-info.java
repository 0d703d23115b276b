/**
 * mcore4j's own CUDA kernels: CUDA C sources shipped as resources, compiled at run time for the
 * device's architecture by NVRTC ({@link io.mcore4j.cuda.RuntimeCompiledModule}) and launched through
 * the driver API on the thread's {@link io.mcore4j.cuda.CurrentStream} (the legacy default stream of
 * DJL's libtorch ops, or a CUDA graph's capture stream). Each kernel implements an interface of core's
 * {@code io.mcore4j.core.kernel} package and is registered as its service, so CPU-only modules use it
 * without depending on CUDA. CUDA graphs ({@link io.mcore4j.cuda.CudaGraphCapture}) are such a
 * service too, through a native library of mcore4j's built against the host's libtorch.
 * {@link io.mcore4j.cuda.DevicePointers} gives the device address of a DJL tensor, to these kernels and
 * to the NCCL backend ({@code mcore4j-nccl}).
 */
package io.mcore4j.cuda;
