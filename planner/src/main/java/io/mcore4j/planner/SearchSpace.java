package io.mcore4j.planner;

import io.mcore4j.models.TransformerConfig.Recompute;
import io.mcore4j.optimizer.DataParallelShardingStrategy;

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
 * @param sharding the Megatron FSDP strategies tried ({@link Layout#sharding()}: not {@code optim}); each only
 *     where it fits the layout: {@code optim_grads} with the distributed optimizer and PP 1,
 *     {@code optim_grads_params} also, unless {@code freesWeightsInPlace}, with full uniform recompute
 * @param freesWeightsInPlace whether the job's device frees a released weight's memory in place, so that ZeRO-3
 *     ({@code optim_grads_params}) releases the weights of a layer that keeps its graph and gathers them again for
 *     its backward: mcore4j's native library on a CUDA device ({@code io.mcore4j.core.kernel.StorageResize}). Then
 *     ZeRO-3 is tried with every recompute choice; otherwise (the CPU) only with every layer recomputed (full uniform),
 *     as the model refuses anything else when the step is built
 */
public record SearchSpace(int maxMicroBatchSize, List<Recompute> recompute, List<Boolean> distributedOptimizer,
                          List<Integer> virtualStages, List<Integer> contextParallel, boolean tensorParallelWithinNode,
                          List<DataParallelShardingStrategy> sharding, boolean freesWeightsInPlace) {

    /**
     * Checks the lists are not empty.
     *
     * @throws IllegalArgumentException naming the empty list or bad size
     */
    public SearchSpace {
        if (maxMicroBatchSize < 1) {
            throw new IllegalArgumentException("max micro-batch size " + maxMicroBatchSize + " must be at least 1");
        }
        for (List<?> l : List.of(recompute, distributedOptimizer, virtualStages, contextParallel, sharding)) {
            if (l == null || l.isEmpty()) {
                throw new IllegalArgumentException("every search dimension needs at least one value");
            }
        }
        recompute = List.copyOf(recompute);
        distributedOptimizer = List.copyOf(distributedOptimizer);
        virtualStages = List.copyOf(virtualStages);
        contextParallel = List.copyOf(contextParallel);
        sharding = List.copyOf(sharding);
        if (sharding.contains(DataParallelShardingStrategy.OPTIM)) {
            throw new IllegalArgumentException("sharding optim is no_shard with the distributed optimizer: list no_shard");
        }
    }

    /**
     * A space without Megatron FSDP: sharding {@code no_shard} only ({@link #freesWeightsInPlace()} then decides
     * nothing; it is true).
     *
     * @param maxMicroBatchSize the largest micro-batch tried
     * @param recompute the recompute choices tried
     * @param distributedOptimizer the distributed-optimizer settings tried
     * @param virtualStages virtual pipeline sizes tried where PP > 1
     * @param contextParallel context-parallel sizes tried
     * @param tensorParallelWithinNode whether a tensor-parallel group must stay inside a node
     */
    public SearchSpace(int maxMicroBatchSize, List<Recompute> recompute, List<Boolean> distributedOptimizer,
                       List<Integer> virtualStages, List<Integer> contextParallel, boolean tensorParallelWithinNode) {
        this(maxMicroBatchSize, recompute, distributedOptimizer, virtualStages, contextParallel, tensorParallelWithinNode,
                List.of(DataParallelShardingStrategy.NO_SHARD), true);
    }

    /**
     * This space restricted to one of {@code pretrain-gpt}'s strategies ({@code --use-megatron-fsdp
     * --data-parallel-sharding-strategy} given with {@code --auto-layout}): {@code no_shard} keeps the
     * distributed-optimizer choices, {@code optim} is the distributed optimizer, the others try only
     * themselves (with the distributed optimizer).
     *
     * @param strategy the strategy asked for
     * @return the restricted space
     */
    public SearchSpace only(DataParallelShardingStrategy strategy) {
        boolean none = strategy == DataParallelShardingStrategy.NO_SHARD;
        return new SearchSpace(maxMicroBatchSize, recompute, none ? distributedOptimizer : List.of(true), virtualStages,
                contextParallel, tensorParallelWithinNode,
                List.of(strategy == DataParallelShardingStrategy.OPTIM ? DataParallelShardingStrategy.NO_SHARD : strategy),
                freesWeightsInPlace);
    }

    /**
     * This space for a device that does, or does not, free weights in place ({@link #freesWeightsInPlace()}):
     * {@code pretrain-gpt --auto-layout} sets it from the device the job runs on.
     *
     * @param inPlace whether the job's device frees a released weight's memory in place
     * @return the space with that setting
     */
    public SearchSpace withFreesWeightsInPlace(boolean inPlace) {
        return new SearchSpace(maxMicroBatchSize, recompute, distributedOptimizer, virtualStages, contextParallel,
                tensorParallelWithinNode, sharding, inPlace);
    }

    /**
     * Micro-batches up to 16, every recompute choice, with and without the distributed optimizer,
     * VP 1, 2 and 4, CP 1, 2, 4 and 8, TP inside a node, every sharding strategy, on GPUs that free weights in
     * place (ZeRO-3 with every recompute choice).
     *
     * @return the default space
     */
    public static SearchSpace defaults() {
        return new SearchSpace(16, List.of(Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL), List.of(false, true),
                List.of(1, 2, 4), List.of(1, 2, 4, 8), true, List.of(DataParallelShardingStrategy.values()).stream()
                        .filter(s -> s != DataParallelShardingStrategy.OPTIM).toList(), true);
    }
}
