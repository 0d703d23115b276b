package io.mcore4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

class LayerAssignmentTest {

    @Test
    void evenSplitWithoutInterleavingIsContiguous() {
        LayerAssignment a = LayerAssignment.even(8, 4, 1);
        assertArrayEquals(new int[] {0, 1}, a.layers(0, 0));
        assertArrayEquals(new int[] {6, 7}, a.layers(3, 0));
    }

    @Test
    void interleavedChunkHoldsVirtualStageChunkTimesPipelinePlusRank() {
        LayerAssignment a = LayerAssignment.even(8, 2, 2);
        assertArrayEquals(new int[] {0, 1}, a.layers(0, 0));
        assertArrayEquals(new int[] {2, 3}, a.layers(1, 0));
        assertArrayEquals(new int[] {4, 5}, a.layers(0, 1));
        assertArrayEquals(new int[] {6, 7}, a.layers(1, 1));
        LayerAssignment b = LayerAssignment.even(8, 2, 4);
        assertArrayEquals(new int[] {0}, b.layers(0, 0));
        assertArrayEquals(new int[] {6}, b.layers(0, 3));
        assertArrayEquals(new int[] {7}, b.layers(1, 3));
        assertEquals(7, b.virtualStage(1, 3));
    }

    @Test
    void everyLayerIsHeldExactlyOnce() {
        for (LayerAssignment a : new LayerAssignment[] {LayerAssignment.even(12, 3, 2),
                LayerAssignment.withFirstLast(14, 4, 2, 2, 4), LayerAssignment.withFirstLast(10, 2, 1, 3, 7)}) {
            int next = 0;
            for (int c = 0; c < a.virtualSize(); c++) {
                for (int p = 0; p < a.pipelineSize(); p++) {
                    for (int layer : a.layers(p, c)) {
                        assertEquals(next++, layer, a + " rank " + p + " chunk " + c);
                    }
                }
            }
            assertEquals(a.numLayers(), next, a.toString());
        }
    }

    @Test
    void firstAndLastStagesGetTheirOwnCounts() {
        // 14 layers, 4 ranks, 2 chunks: first rank 2 (1 per chunk), last rank 4 (2 per chunk), middle 8 / 2 = 4 (2 per chunk)
        LayerAssignment a = LayerAssignment.withFirstLast(14, 4, 2, 2, 4);
        assertArrayEquals(new int[] {0}, a.layers(0, 0));
        assertArrayEquals(new int[] {1, 2}, a.layers(1, 0));
        assertArrayEquals(new int[] {3, 4}, a.layers(2, 0));
        assertArrayEquals(new int[] {5, 6}, a.layers(3, 0));
        assertArrayEquals(new int[] {7}, a.layers(0, 1));
        assertArrayEquals(new int[] {12, 13}, a.layers(3, 1));
    }

    @Test
    void countsThatDoNotSplitAreNamed() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> LayerAssignment.even(8, 3, 1));
        assertTrue(e.getMessage().contains("8 layers") && e.getMessage().contains("3 virtual stages"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> LayerAssignment.withFirstLast(8, 4, 2, 3, 1));
        assertTrue(e.getMessage().contains("first stage layers = 3"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> LayerAssignment.withFirstLast(9, 4, 1, 2, 2));
        assertTrue(e.getMessage().contains("middle layers = 5") && e.getMessage().contains("2 middle pipeline ranks"),
                e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> LayerAssignment.withFirstLast(8, 2, 1, 3, 4));
        assertTrue(e.getMessage().contains("must equal the 8 layers"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> LayerAssignment.withFirstLast(8, 1, 1, 4, 4));
        assertThrows(IllegalArgumentException.class, () -> LayerAssignment.even(8, 2, 2).layers(2, 0));
    }
}
