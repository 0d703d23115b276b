package io.mcore4j.parallel.nccl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

class ChunkPlanTest {

    @Test
    void chunksCoverTheRangeInOrderWithoutGaps() {
        long[][] cases = {{0, 4, 16}, {1, 4, 16}, {4, 4, 16}, {5, 4, 16}, {17, 2, 6}, {1000, 2, 1 << 20}, {7, 8, 3}};
        for (long[] c : cases) {
            ChunkPlan plan = ChunkPlan.of(c[0], (int) c[1], c[2]);
            long next = 0;
            for (int i = 0; i < plan.chunks(); i++) {
                assertEquals(next, plan.offset(i), "offset of chunk " + i + " in " + plan);
                assertTrue(plan.length(i) >= 1, plan.toString());
                assertTrue(plan.length(i) * c[1] <= Math.max(c[2], c[1]), "chunk " + i + " of " + plan + " exceeds the byte limit");
                if (i < plan.chunks() - 1) {
                    assertEquals(plan.chunkElements(), plan.length(i), "only the last chunk may be short");
                }
                next += plan.length(i);
            }
            assertEquals(c[0], next, "chunks of " + plan + " must sum to the count");
        }
    }

    @Test
    void largeTransfersSplitUnderTheLimit() {
        // 3 GiB of fp16 in 1 GiB chunks: 3 calls of 2^29 elements
        long count = 3L << 29;
        ChunkPlan plan = ChunkPlan.of(count, 2, 1L << 30);
        assertEquals(3, plan.chunks());
        assertEquals(1L << 29, plan.length(2));
        assertEquals(2L << 29, plan.offset(2));
        // one byte more than a chunk needs a second call of one element
        ChunkPlan odd = ChunkPlan.of((1L << 28) + 1, 4, 1L << 30);
        assertEquals(2, odd.chunks());
        assertEquals(1, odd.length(1));
    }

    @Test
    void aChunkHoldsAtLeastOneElement() {
        assertEquals(1, ChunkPlan.of(5, 8, 3).chunkElements());
        assertEquals(5, ChunkPlan.of(5, 8, 3).chunks());
    }

    @Test
    void invalidSizesAreRejected() {
        assertThrows(IllegalArgumentException.class, () -> ChunkPlan.of(-1, 4, 16));
        assertThrows(IllegalArgumentException.class, () -> ChunkPlan.of(1, 0, 16));
        assertThrows(IllegalArgumentException.class, () -> ChunkPlan.of(1, 4, 0));
        assertThrows(IllegalArgumentException.class, () -> new ChunkPlan(1, 0));
        ChunkPlan plan = ChunkPlan.of(10, 4, 16);
        assertThrows(IndexOutOfBoundsException.class, () -> plan.offset(3));
        assertThrows(IndexOutOfBoundsException.class, () -> ChunkPlan.of(0, 4, 16).length(0));
    }
}
