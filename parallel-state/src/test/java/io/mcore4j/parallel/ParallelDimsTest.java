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
