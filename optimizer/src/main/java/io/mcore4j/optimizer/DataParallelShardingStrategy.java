package io.mcore4j.optimizer;

import java.util.Arrays;
import java.util.stream.Collectors;

/**
 * What data parallelism shards over the data-parallel ranks, Megatron FSDP's
 * {@code --data-parallel-sharding-strategy}: each value shards what the one before it does and more.
 *
 * <ul>
 *   <li>{@link #NO_SHARD}: nothing beyond what {@link OptimizerConfig#useDistributedOptimizer()} asks
 *       (replicas without it, ZeRO-1 with it: today's two data-parallel modes);</li>
 *   <li>{@link #OPTIM}: the fp32 master weights and optimizer moments (ZeRO-1, the distributed optimizer);</li>
 *   <li>{@link #OPTIM_GRADS}: also the gradients (ZeRO-2): each bucket is reduce-scattered as every
 *       backward pass completes it, its full gradients are released at once, and only this rank's shard
 *       is accumulated over the micro-batches ({@link DistributedDataParallel});</li>
 *   <li>{@link #OPTIM_GRADS_PARAMS}: also the parameters (ZeRO-3): between uses a bucket's parameters
 *       hold no values; they are all-gathered from the master shards before a layer reads them and
 *       released after its forward and after its backward ({@link ShardedParamGather}). Where the device
 *       frees a buffer's memory in place (mcore4j's native library on a CUDA device) a layer keeps its graph and
 *       its weights are gathered again for its backward; elsewhere the model must recompute every layer, since
 *       libtorch's own calls cannot release a weight that a kept graph saved.</li>
 * </ul>
 */
public enum DataParallelShardingStrategy {
    /** Megatron's {@code no_shard}. */
    NO_SHARD("no_shard"),
    /** Megatron's {@code optim}: ZeRO-1. */
    OPTIM("optim"),
    /** Megatron's {@code optim_grads}: ZeRO-2. */
    OPTIM_GRADS("optim_grads"),
    /** Megatron's {@code optim_grads_params}: ZeRO-3. */
    OPTIM_GRADS_PARAMS("optim_grads_params");

    private final String flag;

    DataParallelShardingStrategy(String flag) {
        this.flag = flag;
    }

    /** @return the value as Megatron's flag spells it, e.g. {@code optim_grads} */
    public String flag() {
        return flag;
    }

    /** @return whether the optimizer state is sharded (every value but {@link #NO_SHARD}) */
    public boolean shardsOptimizerState() {
        return this != NO_SHARD;
    }

    /** @return whether gradients are reduce-scattered per backward pass and only the shard is kept */
    public boolean shardsGradients() {
        return this == OPTIM_GRADS || this == OPTIM_GRADS_PARAMS;
    }

    /** @return whether parameters are stored sharded between uses */
    public boolean shardsParameters() {
        return this == OPTIM_GRADS_PARAMS;
    }

    /**
     * @param flag a value of {@code --data-parallel-sharding-strategy}
     * @return the strategy
     * @throws IllegalArgumentException naming the value and the accepted ones
     */
    public static DataParallelShardingStrategy of(String flag) {
        for (DataParallelShardingStrategy s : values()) {
            if (s.flag.equals(flag)) {
                return s;
            }
        }
        throw new IllegalArgumentException("--data-parallel-sharding-strategy " + flag + " is not one of "
                + Arrays.stream(values()).map(DataParallelShardingStrategy::flag).collect(Collectors.joining(", ")));
    }
}
