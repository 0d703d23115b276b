package io.mcore4j.core;

import static org.junit.jupiter.api.Assertions.assertEquals;

import org.junit.jupiter.api.Test;

/** The process-wide settings mcore4j applies before DJL and JavaCPP start. */
class Mcore4jSettingsTest {
    @Test
    void javaCppDoesNotCapTheProcesssResidentMemory() {
        // unless the user set it: the cap counts libtorch's host tensors (an offloaded optimizer state of 75 GiB)
        // against 4 x -Xmx and then refuses JavaCPP's own allocations (seen on an H200 host, LLaMA-7B with
        // --optimizer-cpu-offload: "physicalBytes (77684M) > maxPhysicalBytes (32768M)")
        Mcore4j.ensureInitialized();
        assertEquals("0", System.getProperty(Mcore4j.JAVACPP_MAX_PHYSICAL_BYTES));
        assertEquals("true", System.getProperty("ai.djl.offline"));
    }
}
