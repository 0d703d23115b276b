package io.mcore4j.parallel;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Ranks laid out on a grid of named axes. A rank is a mixed-radix number whose digits are its
 * coordinates along the axes of the order string, first axis fastest: with order
 * {@code tp-cp-ep-dp-pp}, {@code rank = tp + TP*(cp + CP*(ep + EP*(dp + DP*pp)))}.
 *
 * <p>The group of a rank over a set of axes holds every rank that agrees with it on all other axes,
 * ordered by the same mixed-radix rule restricted to those axes. Immutable and thread-safe.
 */
public final class RankGrid {
    private final List<String> axes;
    private final int[] sizes;
    private final int worldSize;

    private RankGrid(Map<String, Integer> sizeByAxis, List<String> order) {
        this.axes = List.copyOf(order);
        this.sizes = new int[axes.size()];
        int world = 1;
        for (int i = 0; i < axes.size(); i++) {
            sizes[i] = sizeByAxis.getOrDefault(axes.get(i), 1);
            world *= sizes[i];
        }
        for (Map.Entry<String, Integer> e : sizeByAxis.entrySet()) {
            if (e.getValue() > 1 && !axes.contains(e.getKey())) {
                throw new IllegalArgumentException("axis " + e.getKey() + " of size " + e.getValue() + " is not in the order " + axes);
            }
        }
        this.worldSize = world;
    }

    /**
     * The grid of dense (non-expert) layers: axes tp, cp, dp, pp (ep has size 1 here).
     *
     * @param dims the layout
     * @return the grid
     */
    public static RankGrid dense(ParallelDims dims) {
        Map<String, Integer> s = new LinkedHashMap<>();
        s.put("tp", dims.tensorParallel());
        s.put("cp", dims.contextParallel());
        s.put("ep", 1);
        s.put("dp", dims.dataParallel());
        s.put("pp", dims.pipelineParallel());
        return new RankGrid(s, dims.axes());
    }

    /**
     * The grid of expert layers on the same ranks: tp is expert-TP, ep is EP, dp is expert-DP, cp is 1.
     *
     * @param dims the layout
     * @return the grid
     */
    public static RankGrid expert(ParallelDims dims) {
        Map<String, Integer> s = new LinkedHashMap<>();
        s.put("tp", dims.expertTensorParallel());
        s.put("cp", 1);
        s.put("ep", dims.expertParallel());
        s.put("dp", dims.expertDataParallel());
        s.put("pp", dims.pipelineParallel());
        return new RankGrid(s, dims.axes());
    }

    /** @return number of ranks on the grid */
    public int worldSize() {
        return worldSize;
    }

    /**
     * A rank's coordinate along one axis.
     *
     * @param axis an axis name (tp, cp, ep, dp, pp)
     * @param rank a global rank
     * @return the coordinate, 0 for an axis absent from the order
     */
    public int coordinate(String axis, int rank) {
        checkRank(rank);
        int i = axes.indexOf(axis);
        if (i < 0) {
            return 0;
        }
        int r = rank;
        for (int k = 0; k < i; k++) {
            r /= sizes[k];
        }
        return r % sizes[i];
    }

    /**
     * The group of {@code rank} over the axes named in {@code groupAxes}.
     *
     * @param groupAxes axes joined by '-', e.g. {@code "tp"} or {@code "cp-dp"}
     * @param rank a global rank
     * @return the member ranks, ordered
     */
    public int[] groupOf(String groupAxes, int rank) {
        checkRank(rank);
        boolean[] in = mask(groupAxes);
        int[] coords = new int[axes.size()];
        int r = rank;
        for (int i = 0; i < axes.size(); i++) {
            coords[i] = r % sizes[i];
            r /= sizes[i];
        }
        int groupSize = 1;
        for (int i = 0; i < axes.size(); i++) {
            if (in[i]) {
                groupSize *= sizes[i];
            }
        }
        int[] members = new int[groupSize];
        for (int m = 0; m < groupSize; m++) {
            int rem = m;
            int[] c = coords.clone();
            for (int i = 0; i < axes.size(); i++) {
                if (in[i]) {
                    c[i] = rem % sizes[i];
                    rem /= sizes[i];
                }
            }
            members[m] = rankOf(c);
        }
        return members;
    }

    /**
     * Every group over {@code groupAxes}, ordered by their smallest rank.
     *
     * @param groupAxes axes joined by '-'
     * @return the groups
     */
    public List<int[]> groups(String groupAxes) {
        List<int[]> out = new ArrayList<>();
        boolean[] seen = new boolean[worldSize];
        for (int rank = 0; rank < worldSize; rank++) {
            if (!seen[rank]) {
                int[] g = groupOf(groupAxes, rank);
                for (int member : g) {
                    seen[member] = true;
                }
                out.add(g);
            }
        }
        return out;
    }

    private int rankOf(int[] coords) {
        int rank = 0;
        for (int i = axes.size() - 1; i >= 0; i--) {
            rank = rank * sizes[i] + coords[i];
        }
        return rank;
    }

    private boolean[] mask(String groupAxes) {
        boolean[] in = new boolean[axes.size()];
        for (String a : groupAxes.split("-")) {
            if (!List.of("tp", "cp", "ep", "dp", "pp").contains(a)) {
                throw new IllegalArgumentException("unknown axis \"" + a + "\" in \"" + groupAxes + "\"");
            }
            int i = axes.indexOf(a);
            if (i >= 0) {
                in[i] = true;
            }
        }
        return in;
    }

    private void checkRank(int rank) {
        if (rank < 0 || rank >= worldSize) {
            throw new IllegalArgumentException("rank " + rank + " is outside [0, " + worldSize + ")");
        }
    }

    @Override
    public String toString() {
        return "RankGrid" + axes + Arrays.toString(sizes);
    }
}
