package io.mcore4j.parallel;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;

import org.junit.jupiter.api.Test;

class ParallelDimsTest {

    @Test
    void errorsNameTheNumbers() {
        assertEquals("tensor parallel size 3 does not divide world size 8",
                assertThrows(IllegalArgumentException.class, () -> ParallelDims.of(8, 3, 1)).getMessage());
        assertEquals("virtual pipeline parallel size 2 needs pipeline parallel size > 1, got 1",
                assertThrows(IllegalArgumentException.class,
                        () -> ParallelDims.builder(8).virtualPipelineParallel(2).build()).getMessage());
        assertEquals("axis pp has size 2 but is missing from the order \"tp-dp\"",
                assertThrows(IllegalArgumentException.class,
                        () -> ParallelDims.builder(8).tensorParallel(2).pipelineParallel(2).order("tp-dp").build()).getMessage());
        assertEquals("tensor x context x pipeline parallel size 4 x 1 x 4 = 16 does not divide world size 8",
                assertThrows(IllegalArgumentException.class, () -> ParallelDims.of(8, 4, 4)).getMessage());
        assertThrows(IllegalArgumentException.class, () -> ParallelDims.builder(8).order("tp-xx").build());
        assertEquals(2, ParallelDims.of(8, 2, 2).dataParallel());
    }

    @Test
    void groupsOfTp2Pp2Dp2InDefaultOrder() {
        RankGrid grid = RankGrid.dense(ParallelDims.of(8, 2, 2));
        assertGroups(grid.groups("tp"), new int[][] {{0, 1}, {2, 3}, {4, 5}, {6, 7}});
        assertGroups(grid.groups("dp"), new int[][] {{0, 2}, {1, 3}, {4, 6}, {5, 7}});
        assertGroups(grid.groups("pp"), new int[][] {{0, 4}, {1, 5}, {2, 6}, {3, 7}});
        assertGroups(grid.groups("tp-pp"), new int[][] {{0, 1, 4, 5}, {2, 3, 6, 7}});
    }

    @Test
    void groupsOfTp2Pp2Dp2InOrderTpPpDp() {
        RankGrid grid = RankGrid.dense(ParallelDims.builder(8).tensorParallel(2).pipelineParallel(2).order("tp-pp-dp").build());
        assertGroups(grid.groups("tp"), new int[][] {{0, 1}, {2, 3}, {4, 5}, {6, 7}});
        assertGroups(grid.groups("dp"), new int[][] {{0, 4}, {1, 5}, {2, 6}, {3, 7}});
        assertGroups(grid.groups("pp"), new int[][] {{0, 2}, {1, 3}, {4, 6}, {5, 7}});
    }

    @Test
    void expertGroupsShareTheRanksOfDenseGroups() {
        ParallelDims dims = ParallelDims.builder(8).tensorParallel(2).expertParallel(4).expertTensorParallel(1).build();
        assertEquals(4, dims.dataParallel());
        assertEquals(2, dims.expertDataParallel());
        RankGrid expert = RankGrid.expert(dims);
        // expert-TP 1: ep is the fastest axis in effect, then expert-dp
        assertGroups(expert.groups("ep"), new int[][] {{0, 1, 2, 3}, {4, 5, 6, 7}});
        assertGroups(expert.groups("dp"), new int[][] {{0, 4}, {1, 5}, {2, 6}, {3, 7}});
        assertGroups(expert.groups("tp"), new int[][] {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}});
    }

    @Test
    void expertTensorParallelDefaultsToTensorParallelAsInMegatron() {
        ParallelDims dims = ParallelDims.builder(8).tensorParallel(2).expertParallel(2).build();
        assertEquals(2, dims.expertTensorParallel());
        assertEquals(2, dims.expertDataParallel());
        assertEquals(1, ParallelDims.builder(8).expertParallel(2).build().expertTensorParallel());
        assertEquals(1, ParallelDims.builder(8).tensorParallel(2).expertParallel(2).expertTensorParallel(1).build()
                .expertTensorParallel());
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> ParallelDims.builder(4).tensorParallel(2).expertParallel(4).build());
        assertTrue(e.getMessage().contains("expert tensor x expert x pipeline parallel size 2 x 4 x 1 = 8 does not divide world size 4"),
                e.getMessage());
    }

    @Test
    void hierarchicalContextParallelSizesMultiplyToTheContextParallelSize() {
        assertEquals("hierarchical context parallel sizes [2, 3] multiply to 6, not context parallel size 4",
                assertThrows(IllegalArgumentException.class, () -> ParallelDims.builder(8).contextParallel(4)
                        .hierarchicalContextParallelSizes(2, 3).build()).getMessage());
        assertEquals("hierarchical context parallel sizes [0, 4] must all be at least 1",
                assertThrows(IllegalArgumentException.class, () -> ParallelDims.builder(8).contextParallel(4)
                        .hierarchicalContextParallelSizes(0, 4).build()).getMessage());
        ParallelDims dims = ParallelDims.builder(8).contextParallel(4).hierarchicalContextParallelSizes(2, 2).build();
        assertEquals(List.of(2, 2), dims.hierarchicalContextParallelSizes());
        assertEquals("world 8: TP1 CP4 PP1 DP2 (hierarchical CP [2, 2]) order tp-cp-ep-dp-pp", dims.toString());
        assertEquals(List.of(), ParallelDims.of(8, 2, 2).hierarchicalContextParallelSizes());
    }

    @Test
    void hierarchicalLevelsAreConsecutiveThenStridedContextParallelRanks() {
        // TP2 CP8 (cp group of rank 1: 1, 3, ..., 15) as levels 2 x 4: level 0 pairs of consecutive cp
        // ranks, level 1 every second cp rank
        RankGrid grid = RankGrid.dense(ParallelDims.builder(16).tensorParallel(2).contextParallel(8).build());
        int[] cp = grid.groupOf("cp", 1);
        assertArrayEquals(new int[] {1, 3, 5, 7, 9, 11, 13, 15}, cp);
        List<Integer> sizes = List.of(2, 4);
        assertArrayEquals(new int[] {9, 11}, ProcessGroups.hierarchicalGroup(cp, 5, sizes, 0));
        assertArrayEquals(new int[] {3, 7, 11, 15}, ProcessGroups.hierarchicalGroup(cp, 5, sizes, 1));
        // three levels 2 x 2 x 2: the middle one strides 2, the outer 4
        List<Integer> three = List.of(2, 2, 2);
        assertArrayEquals(new int[] {9, 13}, ProcessGroups.hierarchicalGroup(cp, 6, three, 1));
        assertArrayEquals(new int[] {5, 13}, ProcessGroups.hierarchicalGroup(cp, 6, three, 2));
        // degenerate levels: 1 x 8 is the whole group as the outer level, 8 x 1 as the inner one
        assertArrayEquals(new int[] {11}, ProcessGroups.hierarchicalGroup(cp, 5, List.of(1, 8), 0));
        assertArrayEquals(cp, ProcessGroups.hierarchicalGroup(cp, 5, List.of(1, 8), 1));
        assertArrayEquals(cp, ProcessGroups.hierarchicalGroup(cp, 5, List.of(8, 1), 0));
    }

    @Test
    void coordinatesInvertTheLayout() {
        RankGrid grid = RankGrid.dense(ParallelDims.of(8, 2, 2));
        for (int r = 0; r < 8; r++) {
            assertEquals(r, grid.coordinate("tp", r) + 2 * grid.coordinate("dp", r) + 4 * grid.coordinate("pp", r));
        }
    }

    private static void assertGroups(List<int[]> actual, int[][] expected) {
        assertEquals(expected.length, actual.size());
        for (int i = 0; i < expected.length; i++) {
            assertArrayEquals(expected[i], actual.get(i), "group " + i);
        }
    }
}
