package io.mcore4j.data.sampler;

import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class PretrainingSamplerTest {
    private static List<long[]> batches(PretrainingSampler sampler) {
        List<long[]> out = new ArrayList<>();
        sampler.forEach(out::add);
        return out;
    }

    @Test
    void eachRankGetsItsSliceOfEveryGlobalBatch() {
        List<long[]> rank0 = batches(new PretrainingSampler(20, 0, 2, 0, 3, true));
        List<long[]> rank2 = batches(new PretrainingSampler(20, 0, 2, 2, 3, true));
        assertEquals(3, rank0.size()); // 20 samples, 6 per step, the last 2 dropped
        assertArrayEquals(new long[] {0, 1}, rank0.get(0));
        assertArrayEquals(new long[] {6, 7}, rank0.get(1));
        assertArrayEquals(new long[] {4, 5}, rank2.get(0));
        assertArrayEquals(new long[] {16, 17}, rank2.get(2));
    }

    @Test
    void ranksAreDisjointAndTogetherCoverEverySample() {
        int dp = 4;
        Set<Long> seen = new HashSet<>();
        long steps = -1;
        for (int r = 0; r < dp; r++) {
            List<long[]> mine = batches(new PretrainingSampler(1000, 40, 3, r, dp, false));
            if (steps < 0) {
                steps = mine.size();
            }
            assertEquals(steps, mine.size(), "every rank takes the same number of steps");
            for (long[] batch : mine) {
                for (long i : batch) {
                    assertTrue(seen.add(i), "sample " + i + " was given to two ranks");
                }
            }
        }
        assertEquals(960, seen.size());
        for (long i = 40; i < 1000; i++) {
            assertTrue(seen.contains(i));
        }
    }

    @Test
    void aResumedSamplerContinuesWhereTheFirstStopped() {
        List<long[]> full = batches(new PretrainingSampler(100, 0, 2, 1, 2, true));
        List<long[]> resumed = batches(new PretrainingSampler(100, 5 * 4, 2, 1, 2, true));
        assertEquals(full.size() - 5, resumed.size());
        for (int k = 0; k < resumed.size(); k++) {
            assertArrayEquals(full.get(k + 5), resumed.get(k));
        }
        PretrainingSampler s = new PretrainingSampler(100, 20, 2, 1, 2, true);
        assertArrayEquals(s.microBatch(3), resumed.get(3));
    }

    @Test
    void theLastIncompleteBatchIsSplitOrDropped() {
        // 10 samples, 8 per step: the second step has only samples 8 and 9
        assertEquals(1, batches(new PretrainingSampler(10, 0, 2, 0, 4, true)).size());
        List<long[]> rank0 = batches(new PretrainingSampler(10, 0, 2, 0, 4, false));
        List<long[]> rank1 = batches(new PretrainingSampler(10, 0, 2, 1, 4, false));
        assertEquals(2, rank0.size());
        assertArrayEquals(new long[] {8, 9}, rank0.get(1));
        assertArrayEquals(new long[] {}, rank1.get(1));
        assertArrayEquals(new long[] {8}, batches(new PretrainingSampler(9, 0, 2, 0, 4, false)).get(1));
    }

    @Test
    void invalidArgumentsAreNamed() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> new PretrainingSampler(10, 10, 1, 0, 1, true));
        assertTrue(e.getMessage().contains("consumed samples 10"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> new PretrainingSampler(10, 0, 1, 2, 2, true));
        assertTrue(e.getMessage().contains("data parallel rank 2"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> new PretrainingSampler(10, 0, 0, 0, 1, true));
    }
}
