package io.mcore4j.cuda;

import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.Device;
import io.mcore4j.core.kernel.MasterAdamKernel;

import java.util.ServiceLoader;

import org.junit.jupiter.api.Test;

/** The CUDA kernel is registered as core's service and offers nothing for the CPU (its GPU check: {@link CudaMasterAdamCheck}). */
class CudaMasterAdamProviderTest {

    @Test
    void registeredAsTheServiceOfCoresInterface() {
        boolean found = false;
        for (MasterAdamKernel.Provider p : ServiceLoader.load(MasterAdamKernel.Provider.class)) {
            found |= p instanceof CudaMasterAdam.Provider;
        }
        assertTrue(found, "META-INF/services does not list CudaMasterAdam.Provider");
    }

    @Test
    void noKernelForTheCpu() {
        assertTrue(MasterAdamKernel.find(Device.cpu()).isEmpty());
    }
}
