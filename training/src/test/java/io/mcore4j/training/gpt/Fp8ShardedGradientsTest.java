package io.mcore4j.training.gpt;

import static org.junit.jupiter.api.Assertions.assertEquals;

import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.fp8.Fp8Config;
import io.mcore4j.core.fp8.Fp8Format;
import io.mcore4j.core.fp8.Fp8Scaling;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.optimizer.DataParallelShardingStrategy;
import io.mcore4j.optimizer.OptimizerConfig;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;
import io.mcore4j.training.BatchSource;
import io.mcore4j.training.TrainStep;

import org.junit.jupiter.api.Test;

/**
 * FP8 with sharded gradients (ZeRO-2, {@code optim_grads}): data parallelism sets every gradient to none after each
 * micro-batch's reduce-scatter, which renews the weights' tensor handles, yet the linears cast each weight once per
 * step, as with the distributed optimizer alone: the micro-batches of a step share the cast.
 */
class Fp8ShardedGradientsTest {
    private static final TransformerConfig MODEL = TransformerConfig.builder(2, 64, 4, 128).maxSequenceLength(16)
            .dropout(0, 0).dtype(DataType.BFLOAT16).fp8(Fp8Config.of(Fp8Format.HYBRID)).build();
    private static final int MICRO_BATCHES = 2;

    /** {the FP8 linears, their weight casts after step 1, after step 2}, on rank 0 of DP2. */
    private static long[] casts(DataParallelShardingStrategy strategy) {
        return InJvmWorld.run(2, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.of(2, 1, 1));
            try (NDManager params = rank.manager().newSubManager();
                 GptTrainingModel model = TinyGptTraining.model(MODEL, groups, params)) {
                OptimizerConfig adam = OptimizerConfig.builder().lr(1e-3).useDistributedOptimizer(true).bf16(true)
                        .dataParallelShardingStrategy(strategy).build();
                BatchSource data = TinyGptTraining.batches(16, 2, 128);
                Fp8Scaling fp8 = model.fp8Scaling();
                try (TrainStep step = TrainStep.builder(model, groups, rank.manager()).optimizer(adam).microBatchSize(2)
                        .seqLength(16).globalBatchSize(2 * 2 * MICRO_BATCHES).build()) {
                    step.run(1e-3, 0, data, 0);
                    long first = fp8.weightCasts();
                    step.run(1e-3, 0, data, 2 * 2 * MICRO_BATCHES);
                    return new long[] {fp8.slotNames().size() / 3, first, fp8.weightCasts()};
                }
            }
        }).get(0);
    }

    @Test
    void theMicroBatchesOfAStepShareEachWeightsCastUnderZero2() {
        long[] zero2 = casts(DataParallelShardingStrategy.OPTIM_GRADS);
        long[] zero1 = casts(DataParallelShardingStrategy.OPTIM);
        long linears = zero2[0];
        assertEquals(4 * MODEL.numLayers(), linears, "QKV, projection, FC1 and FC2 per layer");
        assertEquals(linears, zero2[1], "ZeRO-2: casts in a step of " + MICRO_BATCHES + " micro-batches");
        assertEquals(2 * linears, zero2[2], "ZeRO-2: casts after two steps");
        assertEquals(zero1[1], zero2[1], "ZeRO-1 casts as often");
        assertEquals(zero1[2], zero2[2], "ZeRO-1 casts as often");
    }
}
