package io.mcore4j.cuda;

import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.Device;
import io.mcore4j.core.kernel.BucketFillKernel;
import io.mcore4j.core.kernel.Fp8CastKernel;
import io.mcore4j.core.kernel.KernelProvider;
import io.mcore4j.core.kernel.Kernels;
import io.mcore4j.core.kernel.MasterAdamKernel;
import io.mcore4j.core.kernel.QkvGradientKernel;

import java.util.ServiceLoader;

import org.junit.jupiter.api.Test;

/**
 * The CUDA kernels are registered as core's kernel service and offer nothing for the CPU (their GPU
 * checks: {@link CudaMasterAdamCheck}, {@link CudaQkvGradientCheck}).
 */
class CudaKernelsTest {

    @Test
    void registeredAsCoresKernelService() {
        boolean found = false;
        for (KernelProvider p : ServiceLoader.load(KernelProvider.class)) {
            found |= p instanceof CudaKernels;
        }
        assertTrue(found, "META-INF/services does not list CudaKernels");
    }

    @Test
    void noKernelForTheCpu() {
        assertTrue(Kernels.find(MasterAdamKernel.class, Device.cpu()).isEmpty());
        assertTrue(Kernels.find(QkvGradientKernel.class, Device.cpu()).isEmpty());
        assertTrue(Kernels.find(Fp8CastKernel.class, Device.cpu()).isEmpty());
        assertTrue(Kernels.find(BucketFillKernel.class, Device.cpu()).isEmpty());
    }
}
