package io.mcore4j.optimizer;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.nn.Parameter;

import java.util.List;
import java.util.Optional;

import org.junit.jupiter.api.Test;

/** Parameters are placed in global coordinates by their partition: one region, or one per stride chunk. */
class ParameterPlacementTest {

    private static ParameterPlacement place(NDManager m, long[] local, Parameter.Partition partition) {
        Parameter p = new Parameter("w", m.zeros(new Shape(local), DataType.FLOAT32), partition, Parameter.Kind.DENSE);
        return ParameterPlacement.of("w", p);
    }

    @Test
    void aStrideTwoPartAtTp2IsTwoRowRangesOfTheGlobalWeight() {
        try (NDManager m = NDManager.newBaseManager()) {
            // global [8, 3] = [gate rows 0-3; up rows 4-7]: rank 0 holds gate rows 0-1 and up rows 4-5,
            // rank 1 holds gate rows 2-3 and up rows 6-7
            for (int rank = 0; rank < 2; rank++) {
                ParameterPlacement d = place(m, new long[] {4, 3}, new Parameter.Partition(0, rank, 2, 2));
                assertArrayEquals(new long[] {8, 3}, d.globalShape());
                assertArrayEquals(new long[] {4, 3}, d.localShape());
                assertEquals(2, d.regions().size());
                long[][] globalRows = {{0, 4}, {2, 6}};
                for (int j = 0; j < 2; j++) {
                    ParameterPlacement.Region r = d.regions().get(j);
                    assertArrayEquals(new long[] {2L * j, 0}, r.localOffset(), "rank " + rank + " chunk " + j);
                    assertArrayEquals(new long[] {2, 3}, r.extent(), "rank " + rank + " chunk " + j);
                    assertArrayEquals(new long[] {globalRows[rank][j], 0}, r.globalOffset(), "rank " + rank + " chunk " + j);
                }
            }
        }
    }

    @Test
    void aContiguousOrWholeWeightIsOneRegion() {
        try (NDManager m = NDManager.newBaseManager()) {
            ParameterPlacement split = place(m, new long[] {3, 4}, new Parameter.Partition(1, 1, 2));
            assertEquals(1, split.regions().size());
            assertArrayEquals(new long[] {3, 8}, split.globalShape());
            assertArrayEquals(new long[] {0, 4}, split.regions().get(0).globalOffset());
            assertArrayEquals(new long[] {3, 4}, split.regions().get(0).extent());
            ParameterPlacement whole = place(m, new long[] {5}, Parameter.Partition.NONE);
            assertEquals(1, whole.regions().size());
            assertArrayEquals(new long[] {5}, whole.globalShape());
            assertArrayEquals(new long[] {0}, whole.regions().get(0).globalOffset());
        }
    }

    @Test
    void aFlatRangeAcrossTheStrideBoundaryMapsToBothGlobalRowRanges() {
        try (NDManager m = NDManager.newBaseManager()) {
            ParameterPlacement d = place(m, new long[] {4, 3}, new Parameter.Partition(0, 1, 2, 2));
            // flat elements [4, 10) of the local [4, 3] shard: the end of local row 1, local row 2, the start of row 3
            List<FlatRangeBlocks.Block> blocks = FlatRangeBlocks.decompose(d.localShape(), 4, 10);
            StringBuilder placed = new StringBuilder();
            for (FlatRangeBlocks.Block b : blocks) {
                for (ParameterPlacement.Region r : d.regions()) {
                    Optional<ParameterPlacement.Region> part = r.within(b.offset(), b.extent());
                    part.ifPresent(p -> placed.append(p).append("; "));
                }
            }
            assertEquals("local [1, 1] + [1, 2] -> global [3, 1]; local [2, 0] + [1, 3] -> global [6, 0]; "
                    + "local [3, 0] + [1, 1] -> global [7, 0]; ", placed.toString());
        }
    }

    @Test
    void regionsThatDoNotTileTheLocalTensorAreRejected() {
        long[] local = {4, 3};
        ParameterPlacement.Region top = new ParameterPlacement.Region(new long[] {0, 0}, new long[] {2, 3}, new long[] {0, 0});
        ParameterPlacement.Region middle = new ParameterPlacement.Region(new long[] {1, 0}, new long[] {2, 3}, new long[] {4, 0});
        ParameterPlacement.Region bottom = new ParameterPlacement.Region(new long[] {2, 0}, new long[] {2, 3}, new long[] {6, 0});
        long[] global = {8, 3};
        String overlap = assertThrows(IllegalArgumentException.class,
                () -> new ParameterPlacement("w", local, global, List.of(top, middle), 0)).getMessage();
        assertTrue(overlap.contains("overlap"), overlap);
        String gap = assertThrows(IllegalArgumentException.class,
                () -> new ParameterPlacement("w", local, global, List.of(top), 0)).getMessage();
        assertEquals("w: the regions cover 6 of the 12 local elements", gap);
        String outside = assertThrows(IllegalArgumentException.class,
                () -> new ParameterPlacement("w", local, new long[] {7, 3}, List.of(top, bottom), 0)).getMessage();
        assertTrue(outside.contains("along dim 0"), outside);
        assertEquals(12, new ParameterPlacement("w", local, global, List.of(top, bottom), 0).numel());
    }

    @Test
    void partitionRunsFollowTheStridedConvention() {
        // global rows cut into count * stride = 6 chunks of 2; part 1 of 3 is chunks 1 and 4
        List<Parameter.Run> runs = new Parameter.Partition(0, 1, 3, 2).runs(4);
        assertEquals(List.of(new Parameter.Run(0, 2, 2), new Parameter.Run(2, 2, 8)), runs);
        assertEquals(List.of(new Parameter.Run(0, 5, 10)), new Parameter.Partition(0, 2, 4).runs(5));
        assertThrows(IllegalArgumentException.class, () -> new Parameter.Partition(0, 0, 2, 2).runs(3));
    }
}
