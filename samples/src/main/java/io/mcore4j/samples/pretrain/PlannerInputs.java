package io.mcore4j.samples.pretrain;

import io.mcore4j.optimizer.DataParallelShardingStrategy;
import io.mcore4j.planner.Layout;
import io.mcore4j.planner.Workload;
import io.mcore4j.training.gpt.GptTrainingSetup;

/**
 * pretrain-gpt's flags as the planner's inputs: the workload they describe (the tokenizer's
 * vocabulary, padded by the planner per layout) and the layout they select; and the other way, a
 * planned layout written back into the flags ({@code --auto-layout}; a layout with ZeRO-2 or ZeRO-3
 * turns {@code --use-megatron-fsdp} on with its strategy).
 */
public final class PlannerInputs {
    private PlannerInputs() {}

    /**
     * @param args parsed flags
     * @return the workload of these flags
     * @throws IllegalArgumentException naming a bad flag
     */
    public static Workload workload(PretrainArgs args) {
        GptTrainingSetup setup = args.setup();
        return new Workload(setup.model().withVocabSize(args.tokenVocabSize()), setup.seqLength(),
                setup.globalBatchSize(), args.vocabDivisor, setup.optimizer(), setup.attention());
    }

    /**
     * @param args parsed flags
     * @param worldSize ranks
     * @return the layout these flags select on {@code worldSize} ranks
     * @throws IllegalArgumentException if the model-parallel sizes do not divide the world
     */
    public static Layout layout(PretrainArgs args, int worldSize) {
        GptTrainingSetup setup = args.setup();
        int modelParallel = setup.tensorParallel() * setup.pipelineParallel() * setup.contextParallel();
        if (worldSize % modelParallel != 0) {
            throw new IllegalArgumentException("tensor x pipeline x context parallel size " + modelParallel
                    + " does not divide " + worldSize + " GPUs");
        }
        return new Layout(setup.tensorParallel(), setup.pipelineParallel(), setup.virtualStages(),
                worldSize / modelParallel, setup.contextParallel(), setup.expertParallel(), setup.microBatchSize(),
                setup.model().recompute(), setup.model().recomputeMethod(), setup.model().recomputeNumLayers(),
                setup.optimizer().useDistributedOptimizer(), planned(setup.optimizer().dataParallelShardingStrategy()));
    }

    /** @return the strategy as a layout names it ({@code optim} is {@code no_shard} with the distributed optimizer) */
    private static DataParallelShardingStrategy planned(DataParallelShardingStrategy s) {
        return s == DataParallelShardingStrategy.OPTIM ? DataParallelShardingStrategy.NO_SHARD : s;
    }

    /**
     * Sets the layout flags to a planned layout.
     *
     * @param args the flags to change
     * @param layout the layout
     * @param numLayers the model's layers
     */
    static void apply(PretrainArgs args, Layout layout, int numLayers) {
        args.layout.set(layout.tensorParallel(), layout.pipelineParallel(), layout.virtualStages() > 1
                ? numLayers / (layout.pipelineParallel() * layout.virtualStages()) : 0, layout.expertParallel());
        args.contextParallel = layout.contextParallel();
        args.microBatchSize = layout.microBatchSize();
        PretrainArgs.RecomputeGranularity granularity =
                PretrainArgs.RecomputeGranularity.valueOf(layout.recompute().name().toLowerCase(java.util.Locale.ROOT));
        if (granularity != args.recompute) {
            // the planner's selective recompute is the core attention; its full recompute names its method
            args.recomputeModules = null;
        }
        args.recompute = granularity;
        boolean full = layout.recompute() == io.mcore4j.models.TransformerConfig.Recompute.FULL;
        args.recomputeMethod = full ? PretrainArgs.RecomputeMethodKind.valueOf(layout.recomputeMethod().megatronName()) : null;
        args.recomputeNumLayers = full ? layout.recomputeNumLayers() : null;
        args.useDistributedOptimizer = layout.distributedOptimizer();
        if (layout.sharding() != DataParallelShardingStrategy.NO_SHARD) {
            args.useMegatronFsdp = true;
            args.dataParallelShardingStrategy = layout.sharding().flag();
        }
    }
}
