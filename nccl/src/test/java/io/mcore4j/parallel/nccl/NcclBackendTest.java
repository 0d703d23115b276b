package io.mcore4j.parallel.nccl;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.parallel.launch.LaunchEnvironment;

import java.lang.reflect.Modifier;

import org.junit.jupiter.api.Test;

/**
 * What the backend decides without a GPU: its options, and that loading it loads no CUDA. (The store
 * port is {@code RendezvousStore.port}, tested in parallel-state.)
 */
class NcclBackendTest {
    private static final LaunchEnvironment ENV = LaunchEnvironment.loopback(1, 4, 29500);

    @Test
    void builderRejectsInvalidOptionsBeforeTouchingCuda() {
        NcclBackend.Builder b = NcclBackend.builder(ENV);
        assertThrows(IllegalArgumentException.class, () -> b.timeout(java.time.Duration.ZERO));
        assertThrows(IllegalArgumentException.class, () -> b.chunkBytes(0));
        assertThrows(NullPointerException.class, () -> NcclBackend.builder(null));
    }

    @Test
    void loadingTheBackendClassesLoadsNoCuda() throws Exception {
        // initialising these classes must not run CUDA or NCCL code: this machine has neither
        for (String name : new String[] {"NcclBackend", "NcclCommunicator", "NcclComm", "NcclCodes"}) {
            Class<?> c = Class.forName("io.mcore4j.parallel.nccl." + name, true, getClass().getClassLoader());
            assertTrue(Modifier.isFinal(c.getModifiers()), name);
        }
        // the device pointers NCCL takes its buffers' addresses from live in mcore4j-cuda
        Class<?> pointers = Class.forName("io.mcore4j.cuda.DevicePointers", true, getClass().getClassLoader());
        assertTrue(Modifier.isFinal(pointers.getModifiers()), "DevicePointers");
    }
}
