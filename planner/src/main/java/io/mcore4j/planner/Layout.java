package io.mcore4j.planner;

import io.mcore4j.models.TransformerConfig.Recompute;
import io.mcore4j.models.TransformerConfig.RecomputeMethod;
import io.mcore4j.optimizer.DataParallelShardingStrategy;
import io.mcore4j.parallel.ParallelDims;

import java.util.Locale;

/**
 * One candidate way to run a job: the parallel sizes, the micro-batch, the recompute policy and what
 * data parallelism shards. Checked here: positivity, and the rules Megatron FSDP sets on the layout
 * itself (a sharding strategy beyond {@code no_shard} shards the optimizer state, so it needs the
 * distributed optimizer; sharded gradients do not compose with pipeline parallelism). Sharded parameters
 * (ZeRO-3) take any recompute here: whether the layers that keep their graphs may be released depends on the
 * device the job runs on ({@link SearchSpace#freesWeightsInPlace()}; the model refuses them where the device
 * cannot, when the step is built). Whether a model and a world accept a layout is the training setup's decision
 * ({@link LayoutSearch} asks it).
 *
 * @param tensorParallel TP size
 * @param pipelineParallel PP size
 * @param virtualStages model chunks per pipeline rank (1 = not interleaved)
 * @param dataParallel DP size of dense layers
 * @param contextParallel CP size
 * @param expertParallel EP size (1 for dense models)
 * @param microBatchSize samples per micro-batch
 * @param recompute activation recompute granularity
 * @param recomputeMethod with {@link Recompute#FULL}, which layers of each model chunk are recomputed
 *     (Megatron's {@code --recompute-method}); null otherwise
 * @param recomputeNumLayers with {@link Recompute#FULL}, layers per recomputed group (uniform) or
 *     recomputed per model chunk (block), at least 1 (Megatron's {@code --recompute-num-layers}); 0 otherwise
 * @param distributedOptimizer whether optimizer state is sharded over data-parallel ranks
 * @param sharding what Megatron FSDP shards ({@code --data-parallel-sharding-strategy}):
 *     {@link DataParallelShardingStrategy#NO_SHARD} without {@code --use-megatron-fsdp} (then
 *     {@code distributedOptimizer} alone decides), {@link DataParallelShardingStrategy#OPTIM_GRADS} (ZeRO-2) or
 *     {@link DataParallelShardingStrategy#OPTIM_GRADS_PARAMS} (ZeRO-3); {@code optim} is the distributed
 *     optimizer and is written as {@code no_shard} with {@code distributedOptimizer}
 */
public record Layout(int tensorParallel, int pipelineParallel, int virtualStages, int dataParallel, int contextParallel,
                     int expertParallel, int microBatchSize, Recompute recompute, RecomputeMethod recomputeMethod,
                     int recomputeNumLayers, boolean distributedOptimizer, DataParallelShardingStrategy sharding) {

    /**
     * Checks the sizes are positive and the sharding strategy fits the rest.
     *
     * @throws IllegalArgumentException naming the size or the combination that is wrong
     */
    public Layout {
        positive("tensor parallel size", tensorParallel);
        positive("pipeline parallel size", pipelineParallel);
        positive("virtual pipeline stages", virtualStages);
        positive("data parallel size", dataParallel);
        positive("context parallel size", contextParallel);
        positive("expert parallel size", expertParallel);
        positive("micro-batch size", microBatchSize);
        if (recompute == null) {
            throw new IllegalArgumentException("recompute must be given (NONE, SELECTIVE or FULL)");
        }
        if (recompute == Recompute.FULL ? recomputeMethod == null || recomputeNumLayers < 1
                : recomputeMethod != null || recomputeNumLayers != 0) {
            throw new IllegalArgumentException("recompute method " + recomputeMethod + " with " + recomputeNumLayers
                    + " layers does not fit " + recompute + " recompute: full needs uniform or block and at least 1 layer,"
                    + " the others neither");
        }
        if (sharding == null || sharding == DataParallelShardingStrategy.OPTIM) {
            throw new IllegalArgumentException("sharding must be no_shard, optim_grads or optim_grads_params (optim is"
                    + " no_shard with the distributed optimizer), got " + sharding);
        }
        if (sharding.shardsOptimizerState() && !distributedOptimizer) {
            throw new IllegalArgumentException("sharding " + sharding.flag() + " shards the optimizer state: it needs"
                    + " the distributed optimizer");
        }
        if (sharding.shardsGradients() && pipelineParallel > 1) {
            throw new IllegalArgumentException("sharding " + sharding.flag() + " does not compose with pipeline"
                    + " parallelism (PP " + pipelineParallel + "), as in Megatron FSDP");
        }
    }

    /**
     * A layout without Megatron FSDP ({@link DataParallelShardingStrategy#NO_SHARD}).
     *
     * @param tensorParallel TP size
     * @param pipelineParallel PP size
     * @param virtualStages model chunks per pipeline rank
     * @param dataParallel DP size
     * @param contextParallel CP size
     * @param expertParallel EP size
     * @param microBatchSize samples per micro-batch
     * @param recompute activation recompute granularity
     * @param recomputeMethod with full recompute, its method; null otherwise
     * @param recomputeNumLayers with full recompute, its layers; 0 otherwise
     * @param distributedOptimizer whether optimizer state is sharded
     */
    public Layout(int tensorParallel, int pipelineParallel, int virtualStages, int dataParallel, int contextParallel,
                  int expertParallel, int microBatchSize, Recompute recompute, RecomputeMethod recomputeMethod,
                  int recomputeNumLayers, boolean distributedOptimizer) {
        this(tensorParallel, pipelineParallel, virtualStages, dataParallel, contextParallel, expertParallel, microBatchSize,
                recompute, recomputeMethod, recomputeNumLayers, distributedOptimizer, DataParallelShardingStrategy.NO_SHARD);
    }

    /**
     * A layout whose full recompute, if chosen, is uniform with one layer per group (every layer
     * recomputed on its own).
     *
     * @param tensorParallel TP size
     * @param pipelineParallel PP size
     * @param virtualStages model chunks per pipeline rank
     * @param dataParallel DP size
     * @param contextParallel CP size
     * @param expertParallel EP size
     * @param microBatchSize samples per micro-batch
     * @param recompute activation recompute granularity
     * @param distributedOptimizer whether optimizer state is sharded
     */
    public Layout(int tensorParallel, int pipelineParallel, int virtualStages, int dataParallel, int contextParallel,
                  int expertParallel, int microBatchSize, Recompute recompute, boolean distributedOptimizer) {
        this(tensorParallel, pipelineParallel, virtualStages, dataParallel, contextParallel, expertParallel, microBatchSize,
                recompute, recompute == Recompute.FULL ? RecomputeMethod.UNIFORM : null, recompute == Recompute.FULL ? 1 : 0,
                distributedOptimizer);
    }

    /**
     * @param method which layers of each chunk are recomputed
     * @param numLayers layers per group (uniform) or per chunk (block)
     * @return this layout with full recompute by that method
     */
    public Layout withFullRecompute(RecomputeMethod method, int numLayers) {
        return new Layout(tensorParallel, pipelineParallel, virtualStages, dataParallel, contextParallel, expertParallel,
                microBatchSize, Recompute.FULL, method, numLayers, distributedOptimizer, sharding);
    }

    /**
     * @param strategy what Megatron FSDP shards (not {@code optim}: see {@link #sharding()})
     * @return this layout with that strategy, the distributed optimizer on where it shards anything
     * @throws IllegalArgumentException if the strategy does not fit the layout (see the constructor)
     */
    public Layout withSharding(DataParallelShardingStrategy strategy) {
        return new Layout(tensorParallel, pipelineParallel, virtualStages, dataParallel, contextParallel, expertParallel,
                microBatchSize, recompute, recomputeMethod, recomputeNumLayers,
                distributedOptimizer || strategy.shardsOptimizerState(), strategy);
    }

    /** @return ranks this layout uses: TP x PP x CP x DP */
    public int worldSize() {
        return tensorParallel * pipelineParallel * contextParallel * dataParallel;
    }

    /** @return the rank grid of this layout (Megatron-Core's default axis order) */
    public ParallelDims dims() {
        return ParallelDims.builder(worldSize()).tensorParallel(tensorParallel).pipelineParallel(pipelineParallel)
                .virtualPipelineParallel(virtualStages).contextParallel(contextParallel).expertParallel(expertParallel)
                .build();
    }

    /**
     * @param globalBatchSize samples per iteration
     * @return micro-batches each data-parallel replica runs per iteration
     */
    public long microBatches(long globalBatchSize) {
        return globalBatchSize / ((long) microBatchSize * dataParallel);
    }

    /**
     * The {@code pretrain-gpt} flags that select this layout (the data-parallel size follows from
     * the number of ranks).
     *
     * @param numLayers the model's layers (for {@code --num-layers-per-virtual-pipeline-stage})
     * @return flags separated by spaces
     */
    public String flags(int numLayers) {
        StringBuilder b = new StringBuilder();
        b.append("--tensor-model-parallel-size ").append(tensorParallel);
        b.append(" --pipeline-model-parallel-size ").append(pipelineParallel);
        if (virtualStages > 1) {
            b.append(" --num-layers-per-virtual-pipeline-stage ").append(numLayers / (pipelineParallel * virtualStages));
        }
        if (contextParallel > 1) {
            b.append(" --context-parallel-size ").append(contextParallel);
        }
        if (expertParallel > 1) {
            b.append(" --expert-model-parallel-size ").append(expertParallel);
        }
        b.append(" --micro-batch-size ").append(microBatchSize);
        b.append(" --recompute-granularity ").append(recompute.name().toLowerCase(Locale.ROOT));
        if (recompute == Recompute.FULL) {
            b.append(" --recompute-method ").append(recomputeMethod.megatronName());
            b.append(" --recompute-num-layers ").append(recomputeNumLayers);
        }
        if (distributedOptimizer) {
            b.append(" --use-distributed-optimizer");
        }
        if (sharding != DataParallelShardingStrategy.NO_SHARD) {
            b.append(" --use-megatron-fsdp --data-parallel-sharding-strategy ").append(sharding.flag());
        }
        return b.toString();
    }

    /**
     * @return a short name such as {@code TP2 PP2 VP2 DP2 mb1 selective}, {@code TP1 PP1 DP8 mb2 full block 3} or
     *     {@code TP1 PP1 DP4 mb1 none fsdp optim_grads_params}
     */
    public String name() {
        StringBuilder b = new StringBuilder("TP" + tensorParallel + " PP" + pipelineParallel);
        if (virtualStages > 1) {
            b.append(" VP").append(virtualStages);
        }
        if (contextParallel > 1) {
            b.append(" CP").append(contextParallel);
        }
        if (expertParallel > 1) {
            b.append(" EP").append(expertParallel);
        }
        b.append(" DP").append(dataParallel).append(" mb").append(microBatchSize).append(' ')
                .append(recompute.name().toLowerCase(Locale.ROOT));
        if (recompute == Recompute.FULL) {
            b.append(' ').append(recomputeMethod.megatronName()).append(' ').append(recomputeNumLayers);
        }
        if (sharding != DataParallelShardingStrategy.NO_SHARD) {
            b.append(" fsdp ").append(sharding.flag());
        } else if (distributedOptimizer && dataParallel > 1) {
            b.append(" dist-opt");
        }
        return b.toString();
    }

    private static void positive(String what, int value) {
        if (value < 1) {
            throw new IllegalArgumentException(what + " must be at least 1, got " + value);
        }
    }
}
