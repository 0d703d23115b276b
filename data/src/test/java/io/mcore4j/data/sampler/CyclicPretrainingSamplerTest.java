package io.mcore4j.data.sampler;

import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Megatron's random sampler with data sharding: a bucket per rank, reshuffled each epoch, cycling forever. */
class CyclicPretrainingSamplerTest {
    /** 23 samples, micro-batch 2, 3 ranks: 6 per step, 3 full steps per epoch (18 samples), 6 per bucket. */
    private static List<Long> epoch(int rank, int epoch) {
        CyclicPretrainingSampler sampler = new CyclicPretrainingSampler(23, 2, rank, 3);
        List<Long> read = new ArrayList<>();
        for (long step = 0; step < 3; step++) {
            for (long i : sampler.microBatch(18L * epoch + 6 * step)) {
                read.add(i);
            }
        }
        return read;
    }

    @Test
    void eachRankReadsAPermutationOfItsOwnBucketEveryEpoch() {
        for (int rank = 0; rank < 3; rank++) {
            for (int e = 0; e < 3; e++) {
                List<Long> read = epoch(rank, e);
                List<Long> sorted = new ArrayList<>(read);
                sorted.sort(null);
                List<Long> bucket = new ArrayList<>();
                for (long i = 6L * rank; i < 6L * rank + 6; i++) {
                    bucket.add(i);
                }
                assertEquals(bucket, sorted, "rank " + rank + ", epoch " + e + " read " + read);
            }
        }
        assertEquals(18, new CyclicPretrainingSampler(23, 2, 0, 3).samplesPerEpoch());
    }

    @Test
    void epochsAreShuffledDifferentlyAndTheSamplerNeverRunsOut() {
        List<Long> first = epoch(1, 0);
        assertNotEquals(first, epoch(1, 1), "a new epoch, a new order");
        assertNotEquals(List.of(6L, 7L, 8L, 9L, 10L, 11L), first, "not in order");
        CyclicPretrainingSampler sampler = new CyclicPretrainingSampler(23, 2, 1, 3);
        long[] far = sampler.microBatch(6L * 1_000_000);
        assertTrue(far[0] >= 6 && far[0] < 12 && far[1] >= 6 && far[1] < 12, far[0] + ", " + far[1]);
    }

    @Test
    void aResumedSamplerReadsWhatTheStoppedOneWouldHave() {
        CyclicPretrainingSampler running = new CyclicPretrainingSampler(23, 2, 2, 3);
        List<long[]> all = new ArrayList<>();
        for (long consumed = 0; consumed < 60; consumed += 6) {
            all.add(running.microBatch(consumed));
        }
        CyclicPretrainingSampler resumed = new CyclicPretrainingSampler(23, 2, 2, 3);
        for (int step = 7; step < 10; step++) {
            assertArrayEquals(all.get(step), resumed.microBatch(6L * step), "step " + step);
        }
    }

    @Test
    void badArgumentsAreNamed() {
        IllegalArgumentException small = assertThrows(IllegalArgumentException.class,
                () -> new CyclicPretrainingSampler(5, 2, 0, 3));
        assertEquals("--dataloader-type cyclic: the dataset's 5 samples do not fill one micro-batch on every"
                + " data-parallel rank (2 x 3)", small.getMessage());
        assertThrows(IllegalArgumentException.class, () -> new CyclicPretrainingSampler(23, 2, 3, 3));
        assertThrows(IllegalArgumentException.class, () -> new CyclicPretrainingSampler(23, 2, 0, 3).microBatch(4));
    }
}
