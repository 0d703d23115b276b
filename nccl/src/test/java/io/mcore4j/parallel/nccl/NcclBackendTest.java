package io.mcore4j.parallel.nccl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.parallel.launch.LaunchEnvironment;

import java.lang.reflect.Modifier;
import java.util.Map;

import org.junit.jupiter.api.Test;

/** What the backend decides without a GPU: the store port, its options, and that loading it loads no CUDA. */
class NcclBackendTest {
    private static final LaunchEnvironment ENV = LaunchEnvironment.loopback(1, 4, 29500);

    @Test
    void storePortFollowsMasterPortUnlessTorchrunHoldsIt() {
        assertEquals(29500, NcclBackend.storePort(ENV, Map.of()));
        assertEquals(29501, NcclBackend.storePort(ENV, Map.of("TORCHELASTIC_USE_AGENT_STORE", "True")));
        assertEquals(29500, NcclBackend.storePort(ENV, Map.of("TORCHELASTIC_USE_AGENT_STORE", "False")));
        assertEquals(31000, NcclBackend.storePort(ENV, Map.of("TORCHELASTIC_USE_AGENT_STORE", "True", NcclBackend.STORE_PORT_VAR, "31000")));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> NcclBackend.storePort(ENV, Map.of(NcclBackend.STORE_PORT_VAR, "http")));
        assertTrue(e.getMessage().contains("MCORE4J_STORE_PORT=http is not a port number"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> NcclBackend.storePort(ENV, Map.of(NcclBackend.STORE_PORT_VAR, "70000")));
    }

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
        for (String name : new String[] {"NcclBackend", "NcclCommunicator", "NcclComm", "DevicePointers", "NcclCodes"}) {
            Class<?> c = Class.forName("io.mcore4j.parallel.nccl." + name, true, getClass().getClassLoader());
            assertTrue(Modifier.isFinal(c.getModifiers()), name);
        }
    }
}
