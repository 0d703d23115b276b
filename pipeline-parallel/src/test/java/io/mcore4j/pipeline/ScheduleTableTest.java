package io.mcore4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;

import org.junit.jupiter.api.Test;

/** Warmup counts, grouped order and validation, without communication. */
class ScheduleTableTest {

    @Test
    void nonInterleavedWarmupIsStagesAfterThisOne() {
        assertArrayEquals(new int[] {3, 2, 1, 0}, ScheduleTable.nonInterleaved(4, 8).warmups());
        // capped at the number of micro-batches
        assertArrayEquals(new int[] {2, 2, 1, 0}, ScheduleTable.nonInterleaved(4, 2).warmups());
        assertArrayEquals(new int[] {0}, ScheduleTable.nonInterleaved(1, 5).warmups());
    }

    @Test
    void interleavedWarmupAddsTwoPerLaterStageAndOneGroupPerExtraChunk() {
        assertArrayEquals(new int[] {10, 8, 6, 4}, ScheduleTable.of(4, 2, 8, 4).warmups());
        assertArrayEquals(new int[] {10, 8, 6, 4}, ScheduleTable.of(4, 2, 8, 0).warmups(), "default group = pipeline size");
        // PP2 VP3 M4 G2: 2(1-r) + 2*2, capped at 12
        assertArrayEquals(new int[] {6, 4}, ScheduleTable.of(2, 3, 4, 2).warmups());
        // cap: PP4 VP2 M4 G4 gives 2*3 + 4 = 10 > 8 on rank 0
        assertArrayEquals(new int[] {8, 8, 6, 4}, ScheduleTable.of(4, 2, 4, 4).warmups());
        assertEquals(16, ScheduleTable.of(4, 2, 8, 4).warmup(2, true), "forward-only runs are all warmup");
    }

    @Test
    void groupedOrderMatchesMegatronTable() {
        ScheduleTable t = ScheduleTable.of(2, 2, 5, 3);
        assertArrayEquals(new int[] {0, 1, 2, 0, 1, 2, 3, 4, 3, 4}, microBatches(t.forwardOrder()));
        assertArrayEquals(new int[] {0, 0, 0, 1, 1, 1, 0, 0, 1, 1}, chunks(t.forwardOrder()));
        assertArrayEquals(new int[] {0, 1, 2, 0, 1, 2, 3, 4, 3, 4}, microBatches(t.backwardOrder()));
        assertArrayEquals(new int[] {1, 1, 1, 0, 0, 0, 1, 1, 0, 0}, chunks(t.backwardOrder()));
    }

    @Test
    void fullGroupsFollowTheClosedForm() {
        int pp = 4;
        int vp = 3;
        int m = 8;
        int g = 4;
        ScheduleTable t = ScheduleTable.of(pp, vp, m, g);
        for (int k = 0; k < m * vp; k++) {
            VirtualMicroBatch v = t.forward(k);
            assertEquals((k / g) % vp, v.chunk(), "chunk of forward " + k);
            assertEquals((k / (g * vp)) * g + k % g, v.microBatch(), "micro-batch of forward " + k);
        }
    }

    @Test
    void everyChunkSeesEveryMicroBatchOnceInIncreasingOrder() {
        for (int[] c : new int[][] {{2, 2, 5, 3}, {4, 2, 8, 4}, {3, 3, 7, 4}, {2, 4, 9, 3}, {4, 2, 10, 6}}) {
            ScheduleTable t = ScheduleTable.of(c[0], c[1], c[2], c[3]);
            for (List<VirtualMicroBatch> order : List.of(t.forwardOrder(), t.backwardOrder())) {
                assertEquals(c[1] * c[2], order.size());
                int[] nextMb = new int[c[1]];
                for (VirtualMicroBatch v : order) {
                    assertEquals(nextMb[v.chunk()]++, v.microBatch(), t + " " + order);
                }
            }
        }
    }

    @Test
    void computeOrderIsWarmupThenOneForwardOneBackwardThenCooldown() {
        ScheduleTable t = ScheduleTable.nonInterleaved(4, 8);
        List<StageAction> order = t.computeOrder(1, false);
        assertEquals("FFFBFBFBFBFBFBBB", letters(order));
        assertEquals("FFFFFFFF", letters(t.computeOrder(1, true)));
        assertEquals("FBFBFB", letters(ScheduleTable.nonInterleaved(1, 3).computeOrder(0, false)));
    }

    @Test
    void invalidInterleavingNamesTheRule() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> ScheduleTable.of(4, 2, 7, 0));
        assertTrue(e.getMessage().contains("7 mod 4 = 3") && e.getMessage().contains("pipeline size 4"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> ScheduleTable.of(4, 2, 8, 3));
        assertTrue(e.getMessage().contains("group size 3 is smaller than the pipeline size 4"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> ScheduleTable.of(4, 2, 3, 0));
        assertTrue(e.getMessage().contains("exceeds the number of micro-batches 3"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> ScheduleTable.of(1, 2, 4, 0));
        assertTrue(e.getMessage().contains("pipeline size above 1"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> ScheduleTable.of(2, 1, 0, 0));
        // without interleaving any M is fine, and the group size is ignored
        assertEquals(7, ScheduleTable.of(4, 1, 7, 3).totalVirtualMicroBatches());
        // remainder at least the pipeline size is accepted
        assertEquals(18, ScheduleTable.of(4, 2, 9, 5).totalVirtualMicroBatches());
    }

    static int[] microBatches(List<VirtualMicroBatch> order) {
        return order.stream().mapToInt(VirtualMicroBatch::microBatch).toArray();
    }

    static int[] chunks(List<VirtualMicroBatch> order) {
        return order.stream().mapToInt(VirtualMicroBatch::chunk).toArray();
    }

    private static String letters(List<StageAction> order) {
        List<String> out = new ArrayList<>();
        for (StageAction a : order) {
            out.add(a.kind() == StageAction.Kind.FORWARD ? "F" : "B");
        }
        return String.join("", out);
    }
}
