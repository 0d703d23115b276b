package io.mcore4j.core.random;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.Mcore4j;

import org.junit.jupiter.api.Test;

class DeterministicRandomTest {

    @Test
    void seedsDependOnRegionAndCoordinatesOnly() {
        SeedScheme a = new SeedScheme(1234);
        assertEquals(a.seed("dropout", 0, 1), new SeedScheme(1234).seed("dropout", 0, 1));
        assertNotEquals(a.seed("dropout", 0, 1), a.seed("dropout", 1, 0));
        assertNotEquals(a.seed("dropout", 0), a.seed("dropout", 0, 0));
        assertNotEquals(a.seed("dropout", 0), a.seed("init", 0));
        assertNotEquals(a.seed("dropout", 0), new SeedScheme(1235).seed("dropout", 0));
    }

    @Test
    void javaSideNormalsHaveTheRightMomentsAndReplay() {
        DeterministicRandom r = new DeterministicRandom(42);
        float[] x = r.normal(200_000, 1.5, 2.0);
        double mean = 0;
        double sq = 0;
        for (float v : x) {
            mean += v;
        }
        mean /= x.length;
        for (float v : x) {
            sq += (v - mean) * (v - mean);
        }
        assertEquals(1.5, mean, 0.02);
        assertEquals(2.0, Math.sqrt(sq / x.length), 0.02);
        assertArrayEquals(x, new DeterministicRandom(42).normal(200_000, 1.5, 2.0));
    }

    @Test
    void deviceUniformsAreUniformAndReplayFromAState() {
        try (NDManager m = Mcore4j.newRootManager()) {
            DeterministicRandom r = new DeterministicRandom(7);
            long before = r.state();
            float[] u = r.uniform(m, new Shape(100_000), DataType.FLOAT32).toFloatArray();
            float[] next = r.uniform(m, new Shape(100_000), DataType.FLOAT32).toFloatArray();
            int[] bins = new int[10];
            for (float v : u) {
                assertTrue(v >= 0 && v < 1, "sample " + v);
                bins[(int) (v * 10)]++;
            }
            for (int b : bins) {
                assertEquals(10_000, b, 400, "histogram bin");
            }
            int equal = 0;
            for (int i = 0; i < u.length; i++) {
                equal += u[i] == next[i] ? 1 : 0;
            }
            assertTrue(equal < 100, "consecutive calls must differ");
            r.restore(before);
            assertArrayEquals(u, r.uniform(m, new Shape(100_000), DataType.FLOAT32).toFloatArray());
            float[] mask = new DeterministicRandom(3).keepMask(m, new Shape(100_000), 0.25, DataType.FLOAT32).toFloatArray();
            double kept = 0;
            for (float v : mask) {
                kept += v;
            }
            assertEquals(0.75, kept / mask.length, 0.01);
            assertThrows(IllegalArgumentException.class, () -> r.keepMask(m, new Shape(2), 1.0, DataType.FLOAT32));
        }
    }
}
