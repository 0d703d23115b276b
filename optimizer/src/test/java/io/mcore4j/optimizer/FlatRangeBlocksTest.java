package io.mcore4j.optimizer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;

import org.junit.jupiter.api.Test;

/** Every flat range splits into rectangles that cover it exactly, in order. */
class FlatRangeBlocksTest {

    @Test
    void blocksCoverEveryRangeExactlyInFlatOrder() {
        List<long[]> shapes = List.of(new long[] {7}, new long[] {3, 5}, new long[] {2, 3, 4}, new long[] {2, 1, 3, 2},
                new long[] {});
        for (long[] shape : shapes) {
            int numel = 1;
            for (long s : shape) {
                numel *= (int) s;
            }
            for (int start = 0; start <= numel; start++) {
                for (int end = start; end <= numel; end++) {
                    List<FlatRangeBlocks.Block> blocks = FlatRangeBlocks.decompose(shape, start, end);
                    assertTrue(blocks.size() <= Math.max(1, 2 * shape.length - 1), "too many blocks");
                    long next = start;
                    for (FlatRangeBlocks.Block b : blocks) {
                        assertEquals(next, b.flatStart(), "blocks must follow each other");
                        // enumerate the block's elements in row-major order: they must be next, next+1, ...
                        long[] idx = new long[shape.length];
                        for (long k = 0; k < b.numel(); k++) {
                            long rem = k;
                            for (int d = shape.length - 1; d >= 0; d--) {
                                idx[d] = b.offset()[d] + rem % b.extent()[d];
                                rem /= b.extent()[d];
                            }
                            long flat = 0;
                            for (int d = 0; d < shape.length; d++) {
                                assertTrue(idx[d] < shape[d], "block leaves the tensor");
                                flat = flat * shape[d] + idx[d];
                            }
                            assertEquals(next + k, flat, "block elements must be contiguous");
                        }
                        next += b.numel();
                    }
                    assertEquals(end, next, "blocks must end at the range end");
                }
            }
        }
    }
}
