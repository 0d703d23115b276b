package io.mcore4j.checkpoint;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;

import org.junit.jupiter.api.Test;

/** Box arithmetic and the coverage check, without ranks or tensors. */
class ShardCoverageTest {
    static final long[] GLOBAL = {6, 7, 4};
    static final long[][] CUTS = {{0, 1, 6}, {0, 3, 5, 7}, {0, 2, 4}};

    /** An irregular tiling of GLOBAL: 2 x 3 x 2 boxes of unequal sizes. */
    static List<ShardEntry> tiling() {
        List<ShardEntry> out = new ArrayList<>();
        int rank = 0;
        for (int i = 0; i + 1 < CUTS[0].length; i++) {
            for (int j = 0; j + 1 < CUTS[1].length; j++) {
                for (int k = 0; k + 1 < CUTS[2].length; k++) {
                    long[] o = {CUTS[0][i], CUTS[1][j], CUTS[2][k]};
                    long[] s = {CUTS[0][i + 1] - o[0], CUTS[1][j + 1] - o[1], CUTS[2][k + 1] - o[2]};
                    out.add(new ShardEntry("t", SafetensorsDtype.F32, GLOBAL, new Box(o, s), 0, rank++));
                }
            }
        }
        return out;
    }

    @Test
    void anIrregularTilingPassesAndComesBackSortedByOffset() {
        List<ShardEntry> tiles = tiling();
        List<ShardEntry> shuffled = new ArrayList<>(tiles);
        java.util.Collections.reverse(shuffled);
        shuffled.add(new ShardEntry("t", SafetensorsDtype.F32, GLOBAL, new Box(new long[3], GLOBAL), 3, 99));
        assertEquals(tiles, ShardCoverage.validate(shuffled).get("t"), "replicas dropped, order by offset");
    }

    @Test
    void shrinkingOneTileLeavesAGap() {
        List<ShardEntry> tiles = tiling();
        ShardEntry last = tiles.remove(tiles.size() - 1);
        long[] shape = last.box().shape();
        shape[2] -= 1;
        tiles.add(new ShardEntry("t", SafetensorsDtype.F32, GLOBAL, new Box(last.box().offset(), shape), 0, last.rank()));
        InvalidShardingException e = assertThrows(InvalidShardingException.class, () -> ShardCoverage.validate(tiles));
        assertTrue(e.getMessage().contains("cover 158 of 168"), e.getMessage());
    }

    @Test
    void growingOneTileMakesAnOverlap() {
        List<ShardEntry> tiles = tiling();
        ShardEntry first = tiles.remove(0);
        long[] shape = first.box().shape();
        shape[1] += 1;
        tiles.add(0, new ShardEntry("t", SafetensorsDtype.F32, GLOBAL, new Box(first.box().offset(), shape), 0, 0));
        InvalidShardingException e = assertThrows(InvalidShardingException.class, () -> ShardCoverage.validate(tiles));
        assertTrue(e.getMessage().contains("overlap in [0:1, 3:4, 0:2]"), e.getMessage());
    }

    @Test
    void boxesOutsideTheGlobalShapeAreRefused() {
        List<ShardEntry> tiles = List.of(new ShardEntry("t", SafetensorsDtype.F32, new long[] {4},
                new Box(new long[] {2}, new long[] {3}), 0, 0));
        assertTrue(assertThrows(InvalidShardingException.class, () -> ShardCoverage.validate(tiles))
                .getMessage().contains("outside"));
    }

    @Test
    void intersections() {
        Box a = new Box(new long[] {0, 2}, new long[] {4, 4});
        Box b = new Box(new long[] {3, 5}, new long[] {2, 2});
        assertEquals(new Box(new long[] {3, 5}, new long[] {1, 1}), a.intersect(b));
        assertNull(a.intersect(new Box(new long[] {4, 0}, new long[] {1, 9})), "touching is not overlapping");
        assertEquals(1, new Box(new long[0], new long[0]).volume(), "a scalar has one element");
        assertNull(a.intersect(new Box(new long[] {0, 2}, new long[] {0, 4})), "an empty box overlaps nothing");
    }
}
