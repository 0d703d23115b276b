package io.mcore4j.checkpoint;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;

/**
 * Whether a list of boxes tiles a global shape exactly, by box arithmetic: no two boxes overlap
 * and their volumes sum to the global volume (with every box inside the shape, which the caller
 * has checked, together these mean every element lies in exactly one box). Cost is a sort plus a
 * sweep, not a pass over elements. Saving checks the main replicas it is about to write with it
 * ({@link ShardCoverage}); loading checks the shards {@code mcore4j_metadata.json} lists
 * ({@link CheckpointMetadata}), so a checkpoint with a gap or a doubled piece is never read.
 */
final class Tiling {
    /** Beyond this many grid cells (or cells times boxes), a gap is reported by its size alone. */
    private static final long CELL_SEARCH_LIMIT = 1L << 24;

    private Tiling() {}

    /** Why a list of boxes does not tile a shape. */
    sealed interface Problem permits Overlap, Gap {}

    /**
     * Two boxes share elements.
     *
     * @param first index of one box in the checked list
     * @param second index of the other
     * @param common the elements both hold
     */
    record Overlap(int first, int second, Box common) implements Problem {}

    /**
     * Some elements lie in no box.
     *
     * @param covered elements the boxes cover
     * @param total elements of the global shape
     * @param missing a block of elements in no box, or null when finding one would cost too much
     */
    record Gap(long covered, long total, Box missing) implements Problem {
        /** @return the missing block as text, or the count of missing elements when no block was found */
        String describe() {
            return missing != null ? "elements " + missing + " lie in no shard"
                    : (total - covered) + " of " + total + " elements lie in no shard";
        }
    }

    /**
     * @param globalShape the shape to tile
     * @param boxes blocks that each lie inside {@code globalShape}
     * @return null when the boxes tile it exactly, else the first overlap found or the gap
     */
    static Problem check(long[] globalShape, List<Box> boxes) {
        long total = new Box(new long[globalShape.length], globalShape).volume();
        int sweepDim = mostVariedDim(boxes, globalShape.length);
        List<Integer> order = new ArrayList<>();
        for (int i = 0; i < boxes.size(); i++) {
            order.add(i);
        }
        order.sort(Comparator.<Integer>comparingLong(i -> sweepDim < 0 ? 0 : boxes.get(i).offset(sweepDim))
                .thenComparing((i, j) -> Arrays.compare(boxes.get(i).offset(), boxes.get(j).offset())));
        long covered = 0;
        for (int i = 0; i < order.size(); i++) {
            Box a = boxes.get(order.get(i));
            covered = Math.addExact(covered, a.volume());
            for (int j = i + 1; j < order.size(); j++) {
                Box b = boxes.get(order.get(j));
                if (sweepDim >= 0 && b.offset(sweepDim) >= a.end(sweepDim)) {
                    break; // sorted by start along the sweep dim: no later box can reach back into a
                }
                Box common = a.intersect(b);
                if (common != null) {
                    return new Overlap(order.get(i), order.get(j), common);
                }
            }
        }
        return covered == total ? null : new Gap(covered, total, missingBlock(globalShape, boxes));
    }

    /**
     * A block in no box, found on the grid that every box's start and end cut along each dim (each
     * cell of that grid lies wholly inside a box or wholly outside all of them); null when the grid
     * is too large to search.
     */
    private static Box missingBlock(long[] globalShape, List<Box> boxes) {
        int dims = globalShape.length;
        long[][] cuts = new long[dims][];
        long cells = 1;
        for (int d = 0; d < dims; d++) {
            TreeSet<Long> c = new TreeSet<>(List.of(0L, globalShape[d]));
            for (Box b : boxes) {
                c.add(b.offset(d));
                c.add(b.end(d));
            }
            cuts[d] = c.stream().mapToLong(Long::longValue).toArray();
            cells *= cuts[d].length - 1; // at most 2^24 times an int: no overflow
            if (cells > CELL_SEARCH_LIMIT) {
                return null;
            }
        }
        if (cells * Math.max(1, boxes.size()) > CELL_SEARCH_LIMIT) {
            return null;
        }
        int[] cell = new int[dims];
        for (long n = 0; n < cells; n++) {
            long[] offset = new long[dims];
            long[] shape = new long[dims];
            for (int d = 0; d < dims; d++) {
                offset[d] = cuts[d][cell[d]];
                shape[d] = cuts[d][cell[d] + 1] - offset[d];
            }
            Box candidate = new Box(offset, shape);
            if (!candidate.isEmpty() && boxes.stream().noneMatch(candidate::overlaps)) {
                return candidate;
            }
            for (int d = dims - 1; d >= 0 && ++cell[d] == cuts[d].length - 1; d--) {
                cell[d] = 0;
            }
        }
        return null;
    }

    /** The dim along which boxes start at the most distinct offsets: sweeping along it prunes the most pairs. */
    private static int mostVariedDim(List<Box> boxes, int dims) {
        int best = -1;
        int bestCount = 0;
        for (int d = 0; d < dims; d++) {
            Set<Long> starts = new HashSet<>();
            for (Box b : boxes) {
                starts.add(b.offset(d));
            }
            if (starts.size() > bestCount) {
                best = d;
                bestCount = starts.size();
            }
        }
        return best;
    }
}
