package io.mcore4j.contextparallel;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.PackedSequences;

import java.util.Arrays;
import java.util.List;

import org.junit.jupiter.api.Test;

/** The load-balanced split: which positions each rank holds, and the tensors it cuts. */
class ContextParallelSplitTest {

    @Test
    void rankIHoldsChunksIAndTwoCpMinusOneMinusI() {
        // CP2, S=8: chunks of 2; rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2
        assertArrayEquals(new long[] {0, 1, 6, 7}, new ContextParallelSplit(2, 0).positions(8));
        assertArrayEquals(new long[] {2, 3, 4, 5}, new ContextParallelSplit(2, 1).positions(8));
        // CP4, S=16: rank 2 holds chunks 2 and 5
        assertArrayEquals(new long[] {4, 5, 10, 11}, new ContextParallelSplit(4, 2).positions(16));
        assertArrayEquals(new long[] {0, 1, 2, 3}, new ContextParallelSplit(1, 0).positions(4));
        assertArrayEquals(new long[] {0, 1, 6, 7, 2, 3, 4, 5}, new ContextParallelSplit(2, 1).gatheredPositions(8));
        // every position exactly once over the group
        long[] all = new ContextParallelSplit(4, 0).gatheredPositions(24);
        long[] sorted = all.clone();
        Arrays.sort(sorted);
        for (int i = 0; i < sorted.length; i++) {
            assertEquals(i, sorted[i]);
        }
    }

    /**
     * Packed sequences whose lengths 2·CP divides are split one by one, as Megatron's THD format is
     * ({@code thd_get_partitioned_indices}): rank i holds chunks i and 2·CP−1−i of every sequence in turn;
     * other packings keep the whole column's split.
     */
    @Test
    void packedSequencesAreSplitPerSequenceWhen2CpDividesEveryLength() {
        PackedSequences even = PackedSequences.ofLengths(new int[] {4, 8, 4}, new int[] {16});
        ContextParallelSplit rank0 = new ContextParallelSplit(2, 0);
        ContextParallelSplit rank1 = new ContextParallelSplit(2, 1);
        assertEquals(true, rank0.splitsPerSequence(even));
        // sequence [0,4): chunks of 1; [4,12): chunks of 2; [12,16): chunks of 1
        assertArrayEquals(new long[] {0, 3, 4, 5, 10, 11, 12, 15}, rank0.tokenIndicesOf(0, even, 0, 16));
        assertArrayEquals(new long[] {1, 2, 6, 7, 8, 9, 13, 14}, rank0.tokenIndicesOf(1, even, 0, 16));
        assertArrayEquals(rank0.positions(16), rank0.tokenIndicesOf(0, even, 1, 16), "one sequence: the usual split");
        PackedSequences odd = PackedSequences.ofLengths(new int[] {5, 11}, new int[] {16});
        assertEquals(false, rank1.splitsPerSequence(odd));
        assertArrayEquals(rank1.positions(16), rank1.tokenIndicesOf(1, odd, 0, 16));
        assertEquals(false, new ContextParallelSplit(1, 0).splitsPerSequence(even));
        try (NDManager m = NDManager.newBaseManager()) {
            // [16, 2]: value = 100 * column + index
            long[] values = new long[32];
            for (int t = 0; t < 16; t++) {
                values[t * 2] = t;
                values[t * 2 + 1] = 100 + t;
            }
            NDArray x = m.create(values, new Shape(16, 2));
            NDArray part = rank1.split(x, even, m);
            assertEquals(new Shape(8, 2), part.getShape());
            assertArrayEquals(new long[] {1, 104, 2, 105, 6, 106, 7, 107, 8, 108, 9, 109, 13, 110, 14, 111}, part.toLongArray());
        }
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> rank0.tokenIndicesOf(0, even, 0, 32));
        assertEquals("sequence length 32 differs from the packed sequences' 16", e.getMessage());
    }

    @Test
    void splitCutsAnyPerTokenTensorAlongItsSequenceDim() {
        try (NDManager m = NDManager.newBaseManager()) {
            NDArray sequenceFirst = m.arange(0, 16, 1, ai.djl.ndarray.types.DataType.INT64).reshape(8, 2);
            ContextParallelSplit split = new ContextParallelSplit(2, 1);
            NDArray s = split.split(sequenceFirst, 0, m);
            assertEquals(new Shape(4, 2), s.getShape());
            assertArrayEquals(new long[] {4, 5, 6, 7, 8, 9, 10, 11}, s.toLongArray());
            NDArray batchFirst = sequenceFirst.transpose();
            NDArray b = split.split(batchFirst, 1, m);
            assertArrayEquals(new long[] {4, 6, 8, 10, 5, 7, 9, 11}, b.toLongArray());
            assertArrayEquals(split.positions(8), split.positionIds(m, 8).toLongArray());
            NDArray r0 = new ContextParallelSplit(2, 0).split(sequenceFirst, 0, m);
            assertArrayEquals(new long[] {0, 1, 2, 3, 12, 13, 14, 15}, r0.toLongArray());
        }
    }

    @Test
    void runsAreMaximalConsecutiveRanges() {
        List<long[]> runs = ContextParallelSplit.runs(new long[] {2, 3, 4, 9, 10, 12});
        assertEquals(3, runs.size());
        assertArrayEquals(new long[] {2, 5}, runs.get(0));
        assertArrayEquals(new long[] {9, 11}, runs.get(1));
        assertArrayEquals(new long[] {12, 13}, runs.get(2));
    }

    @Test
    void badSizesAndLengthsAreNamed() {
        assertEquals("sequence length 10 is not divisible by 2 x context parallel size 2 = 4 (the load-balanced causal"
                        + " split cuts the sequence into 2·CP equal chunks)",
                assertThrows(IllegalArgumentException.class, () -> new ContextParallelSplit(2, 0).positions(10)).getMessage());
        assertEquals("context parallel rank 2 is outside [0, 2)",
                assertThrows(IllegalArgumentException.class, () -> new ContextParallelSplit(2, 2)).getMessage());
        assertEquals("--cp-comm-type a2a+p2p2 is not supported; supported: [allgather, p2p, a2a, a2a+p2p]",
                assertThrows(IllegalArgumentException.class, () -> CpCommType.fromFlag("a2a+p2p2")).getMessage());
        assertEquals(CpCommType.A2A_P2P, CpCommType.fromFlag("A2A+P2P"));
        assertEquals(CpCommType.A2A, CpCommType.fromFlag("a2a"));
        assertEquals(CpCommType.ALL_GATHER, CpCommType.fromFlag("all_gather"));
        assertEquals(CpCommType.P2P, CpCommType.fromFlag("p2p"));
    }
}
