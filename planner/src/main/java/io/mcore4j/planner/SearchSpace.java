package io.mcore4j.planner;

import io.mcore4j.models.TransformerConfig.Recompute;

import java.util.List;

/**
 * Which layouts the search tries, beyond what the model and the cluster rule out. Sizes listed here
 * are candidates; each is still checked by the training setup.
 *
 * @param maxMicroBatchSize the largest micro-batch tried (every divisor of the per-replica batch up to it)
 * @param recompute the recompute choices tried
 * @param distributedOptimizer the distributed-optimizer settings tried ({@code [false, true]} tries both)
 * @param virtualStages virtual pipeline sizes tried where PP > 1
 * @param contextParallel context-parallel sizes tried
 * @param tensorParallelWithinNode whether a tensor-parallel group must stay inside a node (Megatron practice)
 */
public record SearchSpace(int maxMicroBatchSize, List<Recompute> recompute, List<Boolean> distributedOptimizer,
                          List<Integer> virtualStages, List<Integer> contextParallel, boolean tensorParallelWithinNode) {

    /**
     * Checks the lists are not empty.
     *
     * @throws IllegalArgumentException naming the empty list or bad size
     */
    public SearchSpace {
        if (maxMicroBatchSize < 1) {
            throw new IllegalArgumentException("max micro-batch size " + maxMicroBatchSize + " must be at least 1");
        }
        for (List<?> l : List.of(recompute, distributedOptimizer, virtualStages, contextParallel)) {
            if (l == null || l.isEmpty()) {
                throw new IllegalArgumentException("every search dimension needs at least one value");
            }
        }
        recompute = List.copyOf(recompute);
        distributedOptimizer = List.copyOf(distributedOptimizer);
        virtualStages = List.copyOf(virtualStages);
        contextParallel = List.copyOf(contextParallel);
    }

    /**
     * Micro-batches up to 16, every recompute choice, with and without the distributed optimizer,
     * VP 1, 2 and 4, CP 1, 2, 4 and 8, TP inside a node.
     *
     * @return the default space
     */
    public static SearchSpace defaults() {
        return new SearchSpace(16, List.of(Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL), List.of(false, true),
                List.of(1, 2, 4), List.of(1, 2, 4, 8), true);
    }
}
