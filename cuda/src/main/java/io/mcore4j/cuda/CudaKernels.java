package io.mcore4j.cuda;

import ai.djl.Device;
import io.mcore4j.core.kernel.BiasGradientKernel;
import io.mcore4j.core.kernel.BucketFillKernel;
import io.mcore4j.core.kernel.CrossEntropyKernel;
import io.mcore4j.core.kernel.Fp8CastKernel;
import io.mcore4j.core.kernel.GraphCapture;
import io.mcore4j.core.kernel.HostReadback;
import io.mcore4j.core.kernel.KernelProvider;
import io.mcore4j.core.kernel.LayerNormKernel;
import io.mcore4j.core.kernel.MasterAdamKernel;
import io.mcore4j.core.kernel.QkvGradientKernel;
import io.mcore4j.core.kernel.StorageResize;

import java.util.Optional;

/**
 * The {@link KernelProvider} service of the CUDA artifact: {@link MasterAdamKernel},
 * {@link QkvGradientKernel}, {@link BiasGradientKernel}, {@link CrossEntropyKernel}, {@link LayerNormKernel} and
 * {@link BucketFillKernel} for CUDA devices of compute capability 8.0 or newer (the kernels use bfloat16 conversions), and {@link Fp8CastKernel} for 8.9 or newer (float8 conversions), each source compiled once
 * per device and process; and {@link GraphCapture}
 * (CUDA graphs) and {@link StorageResize} where mcore4j's native library is loaded ({@link NativeCudaGraphs},
 * {@link NativeStorage}); {@link HostReadback}
 * (page-locked copies) on every CUDA device. Off with
 * {@code -Dmcore4j.cuda.kernels=false}: callers then compose the same results from libtorch's kernels.
 */
public final class CudaKernels implements KernelProvider {
    /** System property that turns mcore4j's CUDA kernels off when {@code false}. */
    public static final String ENABLED_PROPERTY = "mcore4j.cuda.kernels";

    @Override
    public <T> Optional<T> create(Class<T> kernel, Device device) {
        if (kernel == GraphCapture.class) {
            return device.isGpu() && CudaGraphCapture.available()
                    ? Optional.of(kernel.cast(new CudaGraphCapture(device.getDeviceId()))) : Optional.empty();
        }
        if (kernel == StorageResize.class) {
            return device.isGpu() && NativeStorage.available() ? Optional.of(kernel.cast(new NativeStorage())) : Optional.empty();
        }
        if (kernel == HostReadback.class) {
            return device.isGpu() ? Optional.of(kernel.cast(new CudaHostReadback(device.getDeviceId()))) : Optional.empty();
        }
        if (!device.isGpu() || "false".equalsIgnoreCase(System.getProperty(ENABLED_PROPERTY))) {
            return Optional.empty();
        }
        if (kernel != MasterAdamKernel.class && kernel != QkvGradientKernel.class && kernel != BiasGradientKernel.class
                && kernel != CrossEntropyKernel.class && kernel != LayerNormKernel.class && kernel != Fp8CastKernel.class
                && kernel != BucketFillKernel.class) {
            return Optional.empty();
        }
        int id = device.getDeviceId();
        try {
            int capability = RuntimeCompiledModule.computeCapability(id);
            if (capability < 80) {
                return Optional.empty();
            }
            if (kernel == Fp8CastKernel.class) {
                return capability < 89 ? Optional.empty()
                        : Optional.of(kernel.cast(new CudaFp8Cast(RuntimeCompiledModule.load(id, CudaFp8Cast.SOURCE))));
            }
            if (kernel == MasterAdamKernel.class) {
                return Optional.of(kernel.cast(new CudaMasterAdam(RuntimeCompiledModule.load(id, CudaMasterAdam.SOURCE))));
            }
            if (kernel == QkvGradientKernel.class) {
                return Optional.of(kernel.cast(new CudaQkvGradient(RuntimeCompiledModule.load(id, CudaQkvGradient.SOURCE))));
            }
            if (kernel == LayerNormKernel.class) {
                return Optional.of(kernel.cast(new CudaLayerNorm(RuntimeCompiledModule.load(id, CudaLayerNorm.SOURCE))));
            }
            if (kernel == BucketFillKernel.class) {
                return Optional.of(kernel.cast(new CudaBucketFill(RuntimeCompiledModule.load(id, CudaBucketFill.SOURCE))));
            }
            if (kernel == CrossEntropyKernel.class) {
                return Optional.of(kernel.cast(new CudaCrossEntropy(RuntimeCompiledModule.load(id, CudaCrossEntropy.SOURCE))));
            }
            return Optional.of(kernel.cast(new CudaBiasGradients(RuntimeCompiledModule.load(id, CudaBiasGradients.SOURCE))));
        } catch (LinkageError e) {
            throw new IllegalStateException("mcore4j's CUDA kernels could not load the CUDA runtime or NVRTC ("
                    + e.getMessage() + "): put CUDA 13's libraries (libcudart, libnvrtc) on the library path, or run"
                    + " with -D" + ENABLED_PROPERTY + "=false to use libtorch's kernels instead", e);
        }
    }
}
