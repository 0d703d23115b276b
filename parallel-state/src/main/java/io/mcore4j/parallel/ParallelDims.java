package io.mcore4j.parallel;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * A parallel layout: how {@code worldSize} ranks split into tensor (TP), context (CP), pipeline
 * (PP, with optional virtual stages), data (DP) and expert (EP, expert-TP) parallelism, and the
 * order in which axes are laid out over ranks.
 *
 * <p>Dense layers use the axes {@code tp, cp, dp, pp} with {@code dp = world / (tp * cp * pp)};
 * expert layers use {@code expertTp, ep, expertDp, pp} on the same ranks with
 * {@code expertDp = world / (expertTp * ep * pp)}. The order string lists axes from fastest to
 * slowest varying (default {@code tp-cp-ep-dp-pp}, Megatron-Core's). Every axis of size above 1 must
 * appear in it.
 *
 * <p>Hierarchical context parallelism (Megatron-Core's {@code hierarchical_context_parallel_sizes})
 * splits the context-parallel group into levels whose sizes multiply to {@code CP}: level 0 groups
 * consecutive context-parallel ranks, each later level the ranks that stride over the levels before it
 * (as the mixed-radix rule of the axes does); {@code --cp-comm-type a2a+p2p} runs its all-to-all over
 * level 0 and its ring over level 1.
 *
 * @param worldSize number of ranks
 * @param tensorParallel TP size
 * @param pipelineParallel PP size
 * @param virtualPipelineParallel virtual stages per pipeline rank (1 = no interleaving)
 * @param contextParallel CP size
 * @param expertParallel EP size
 * @param expertTensorParallel TP size inside experts
 * @param order axis order, fastest first, e.g. {@code "tp-cp-ep-dp-pp"}
 * @param hierarchicalContextParallelSizes the sizes of the context-parallel group's levels, innermost
 *     first, multiplying to {@code contextParallel}; empty for none (never null; held unmodifiable)
 */
public record ParallelDims(int worldSize, int tensorParallel, int pipelineParallel, int virtualPipelineParallel,
                           int contextParallel, int expertParallel, int expertTensorParallel, String order,
                           List<Integer> hierarchicalContextParallelSizes) {

    /** Megatron-Core's default axis order. */
    public static final String DEFAULT_ORDER = "tp-cp-ep-dp-pp";

    private static final List<String> AXES = List.of("tp", "cp", "ep", "dp", "pp");

    /**
     * Validates the layout.
     *
     * @throws IllegalArgumentException naming the offending sizes
     */
    public ParallelDims {
        positive("world size", worldSize);
        positive("tensor parallel size", tensorParallel);
        positive("pipeline parallel size", pipelineParallel);
        positive("virtual pipeline parallel size", virtualPipelineParallel);
        positive("context parallel size", contextParallel);
        positive("expert parallel size", expertParallel);
        positive("expert tensor parallel size", expertTensorParallel);
        divides("tensor parallel size", tensorParallel, "world size", worldSize);
        divides("pipeline parallel size", pipelineParallel, "world size", worldSize);
        divides("context parallel size", contextParallel, "world size", worldSize);
        long modelParallel = (long) tensorParallel * contextParallel * pipelineParallel;
        if (worldSize % modelParallel != 0) {
            throw new IllegalArgumentException("tensor x context x pipeline parallel size " + tensorParallel + " x "
                    + contextParallel + " x " + pipelineParallel + " = " + modelParallel
                    + " does not divide world size " + worldSize);
        }
        long expertModel = (long) expertTensorParallel * expertParallel * pipelineParallel;
        if (worldSize % expertModel != 0) {
            throw new IllegalArgumentException("expert tensor x expert x pipeline parallel size "
                    + expertTensorParallel + " x " + expertParallel + " x " + pipelineParallel + " = "
                    + expertModel + " does not divide world size " + worldSize);
        }
        if (virtualPipelineParallel > 1 && pipelineParallel == 1) {
            throw new IllegalArgumentException("virtual pipeline parallel size " + virtualPipelineParallel
                    + " needs pipeline parallel size > 1, got 1");
        }
        hierarchicalContextParallelSizes = checkHierarchy(hierarchicalContextParallelSizes, contextParallel);
        if (order == null) {
            throw new IllegalArgumentException("order must not be null; use " + DEFAULT_ORDER);
        }
        order = order.toLowerCase(Locale.ROOT);
        List<String> listed = parseOrder(order);
        Map<String, Integer> sizes = new LinkedHashMap<>();
        sizes.put("tp", tensorParallel);
        sizes.put("cp", contextParallel);
        sizes.put("ep", expertParallel);
        sizes.put("dp", (int) (worldSize / modelParallel));
        sizes.put("pp", pipelineParallel);
        for (Map.Entry<String, Integer> e : sizes.entrySet()) {
            if (e.getValue() > 1 && !listed.contains(e.getKey())) {
                throw new IllegalArgumentException("axis " + e.getKey() + " has size " + e.getValue()
                        + " but is missing from the order \"" + order + "\"");
            }
        }
    }

    /**
     * A layout with only TP, PP and DP (derived), default order.
     *
     * @param worldSize ranks
     * @param tensorParallel TP
     * @param pipelineParallel PP
     * @return the layout
     */
    public static ParallelDims of(int worldSize, int tensorParallel, int pipelineParallel) {
        return builder(worldSize).tensorParallel(tensorParallel).pipelineParallel(pipelineParallel).build();
    }

    /**
     * A builder with every size 1 and the default order.
     *
     * @param worldSize ranks
     * @return the builder
     */
    public static Builder builder(int worldSize) {
        return new Builder(worldSize);
    }

    /** @return data-parallel size of dense layers: world / (TP x CP x PP) */
    public int dataParallel() {
        return worldSize / (tensorParallel * contextParallel * pipelineParallel);
    }

    /** @return data-parallel size of expert layers: world / (expert-TP x EP x PP) */
    public int expertDataParallel() {
        return worldSize / (expertTensorParallel * expertParallel * pipelineParallel);
    }

    /** @return the axes of the order string, fastest first */
    public List<String> axes() {
        return parseOrder(order);
    }

    private static List<String> parseOrder(String order) {
        List<String> axes = new ArrayList<>();
        for (String a : order.split("-")) {
            if (!AXES.contains(a)) {
                throw new IllegalArgumentException("unknown axis \"" + a + "\" in order \"" + order
                        + "\"; axes are " + AXES);
            }
            if (axes.contains(a)) {
                throw new IllegalArgumentException("axis " + a + " appears twice in order \"" + order + "\"");
            }
            axes.add(a);
        }
        return axes;
    }

    private static List<Integer> checkHierarchy(List<Integer> sizes, int contextParallel) {
        if (sizes == null || sizes.isEmpty()) {
            return List.of();
        }
        long product = 1;
        for (Integer size : sizes) {
            if (size == null || size < 1) {
                throw new IllegalArgumentException("hierarchical context parallel sizes " + sizes + " must all be at least 1");
            }
            product *= size;
        }
        if (product != contextParallel) {
            throw new IllegalArgumentException("hierarchical context parallel sizes " + sizes + " multiply to " + product
                    + ", not context parallel size " + contextParallel);
        }
        return List.copyOf(sizes);
    }

    private static void positive(String what, int value) {
        if (value < 1) {
            throw new IllegalArgumentException(what + " must be at least 1, got " + value);
        }
    }

    private static void divides(String what, int part, String of, int whole) {
        if (whole % part != 0) {
            throw new IllegalArgumentException(what + " " + part + " does not divide " + of + " " + whole);
        }
    }

    @Override
    public String toString() {
        return "world " + worldSize + ": TP" + tensorParallel + " CP" + contextParallel + " PP" + pipelineParallel
                + (virtualPipelineParallel > 1 ? " VP" + virtualPipelineParallel : "") + " DP" + dataParallel()
                + (expertParallel > 1 || expertTensorParallel > 1
                        ? " (experts: ETP" + expertTensorParallel + " EP" + expertParallel + " EDP" + expertDataParallel() + ")"
                        : "")
                + (hierarchicalContextParallelSizes.isEmpty() ? "" : " (hierarchical CP " + hierarchicalContextParallelSizes + ")")
                + " order " + order;
    }

    /** Builder for {@link ParallelDims}; every size defaults to 1, except expert-TP, which defaults to TP. */
    public static final class Builder {
        private final int worldSize;
        private int tp = 1;
        private int pp = 1;
        private int vp = 1;
        private int cp = 1;
        private int ep = 1;
        private int etp = -1;
        private String order = DEFAULT_ORDER;
        private List<Integer> hierarchicalCp = List.of();

        private Builder(int worldSize) {
            this.worldSize = worldSize;
        }

        /** @param size TP size @return this */
        public Builder tensorParallel(int size) {
            this.tp = size;
            return this;
        }

        /** @param size PP size @return this */
        public Builder pipelineParallel(int size) {
            this.pp = size;
            return this;
        }

        /** @param size virtual stages per pipeline rank @return this */
        public Builder virtualPipelineParallel(int size) {
            this.vp = size;
            return this;
        }

        /** @param size CP size @return this */
        public Builder contextParallel(int size) {
            this.cp = size;
            return this;
        }

        /** @param size EP size @return this */
        public Builder expertParallel(int size) {
            this.ep = size;
            return this;
        }

        /** @param size expert-TP size (defaults to the TP size, as Megatron-Core's {@code expert_tensor_parallel_size}) @return this */
        public Builder expertTensorParallel(int size) {
            this.etp = size;
            return this;
        }

        /** @param axisOrder axis order, fastest first @return this */
        public Builder order(String axisOrder) {
            this.order = axisOrder;
            return this;
        }

        /**
         * @param sizes the context-parallel group's levels, innermost first, multiplying to the CP size
         *     (Megatron-Core's {@code hierarchical_context_parallel_sizes}); empty for none
         * @return this
         */
        public Builder hierarchicalContextParallelSizes(List<Integer> sizes) {
            this.hierarchicalCp = sizes == null ? List.of() : List.copyOf(sizes);
            return this;
        }

        /** @param sizes the levels, innermost first (see {@link #hierarchicalContextParallelSizes(List)}) @return this */
        public Builder hierarchicalContextParallelSizes(int... sizes) {
            return hierarchicalContextParallelSizes(Arrays.stream(sizes).boxed().toList());
        }

        /** @return the validated layout */
        public ParallelDims build() {
            return new ParallelDims(worldSize, tp, pp, vp, cp, ep, etp < 0 ? tp : etp, order, hierarchicalCp);
        }
    }
}
