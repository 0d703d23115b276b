package io.mcore4j.core;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.Map;

import org.junit.jupiter.api.Test;

/** The choice of libtorch's intra-op threads for in-JVM ranks, and that applying it takes effect. */
class CpuThreadsTest {
    @Test
    void ranksShareTheCoresUnlessTheUserChose() {
        assertEquals(new CpuThreads(1, "2 cores / 4 ranks in this process"), CpuThreads.choose(null, 4, 2, null, Map.of()));
        assertEquals(new CpuThreads(4, "8 cores / 2 ranks in this process"), CpuThreads.choose(null, 2, 8, null, Map.of()));
        assertEquals(new CpuThreads(2, "2 cores / 1 rank in this process"), CpuThreads.choose(null, 1, 2, null, Map.of()));
        assertEquals(new CpuThreads(2, "-Dai.djl.pytorch.num_threads"),
                CpuThreads.choose(null, 4, 2, "2", Map.of("OMP_NUM_THREADS", "3")));
        assertEquals(new CpuThreads(3, "OMP_NUM_THREADS"), CpuThreads.choose(null, 4, 2, null, Map.of("OMP_NUM_THREADS", "3")));
        assertEquals(1, CpuThreads.choose(null, 4, 2, null, Map.of("OMP_NUM_THREADS", "abc")).threads(), "unreadable: the rule");
        assertEquals(new CpuThreads(5, "--cpu-threads"), CpuThreads.choose(5, 4, 2, "2", Map.of("OMP_NUM_THREADS", "3")));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> CpuThreads.choose(0, 4, 2, null, Map.of()));
        assertEquals("--cpu-threads 0 must be at least 1", e.getMessage());
    }

    @Test
    void applyingSetsLibtorchsThreads() {
        int before = CpuThreads.current();
        try {
            new CpuThreads(1, "test").apply();
            assertEquals(1, CpuThreads.current());
            new CpuThreads(2, "test").apply();
            assertEquals(2, CpuThreads.current());
        } finally {
            new CpuThreads(before, "test").apply();
        }
    }
}
