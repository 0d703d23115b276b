package io.mcore4j.optimizer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.testing.NativeArrays;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.List;

import org.junit.jupiter.api.Test;

/**
 * Sharded gradients ({@code optim_grads}, ZeRO-2): the same training as the distributed optimizer,
 * with each bucket reduce-scattered per backward pass and the full gradients released at once.
 */
class ShardedGradientsTest {
    private static final OptimizerConfig DISTRIBUTED = OptimizerConfig.builder().lr(1e-2).weightDecay(0.01).clipGrad(1.0)
            .bucketSizeBytes(48).useDistributedOptimizer(true).build();
    private static final OptimizerConfig ZERO2 = DISTRIBUTED.toBuilder()
            .dataParallelShardingStrategy(DataParallelShardingStrategy.OPTIM_GRADS).build();

    @Test
    void zero2TrainsLikeTheDistributedOptimizerAndLikeOneRank() {
        List<DataParallelTraining.Outcome> serial = DataParallelTraining.run(1, DISTRIBUTED, 3, 8, 1, DataType.FLOAT32, 1e-2);
        for (OptimizerConfig zero2 : List.of(ZERO2, ZERO2.toBuilder().overlapGradReduce(true).averageInCollective(true).build())) {
            List<DataParallelTraining.Outcome> reference = DataParallelTraining.run(4, DISTRIBUTED, 3, 8, 2, DataType.FLOAT32, 1e-2);
            List<DataParallelTraining.Outcome> sharded = DataParallelTraining.run(4, zero2, 3, 8, 2, DataType.FLOAT32, 1e-2);
            for (int r = 0; r < 4; r++) {
                double d = DataParallelTraining.maxAbsDiff(sharded.get(r).params(), reference.get(r).params());
                assertTrue(d <= 1e-6, "ZeRO-2 differs from the distributed optimizer on rank " + r + " by " + d);
                assertTrue(DataParallelTraining.maxAbsDiff(sharded.get(r).params(), serial.get(0).params()) <= 1e-5);
                for (int s = 0; s < 3; s++) {
                    assertEquals(reference.get(r).losses().get(s), sharded.get(r).losses().get(s), 1e-6, "loss of step " + s);
                }
                for (int s = 0; s < 3; s++) {
                    double expected = reference.get(r).steps().get(s).gradNorm();
                    assertEquals(expected, sharded.get(r).steps().get(s).gradNorm(), 1e-6 * Math.max(1, expected));
                }
                assertEquals(reference.get(r).stateBytes(), sharded.get(r).stateBytes());
            }
        }
    }

    @Test
    void zero2InBfloat16MatchesTheDistributedOptimizer() {
        OptimizerConfig bf16 = DISTRIBUTED.toBuilder().bf16(true).build();
        OptimizerConfig zero2 = bf16.toBuilder().dataParallelShardingStrategy(DataParallelShardingStrategy.OPTIM_GRADS).build();
        List<DataParallelTraining.Outcome> reference = DataParallelTraining.run(2, bf16, 2, 8, 2, DataType.BFLOAT16, 1e-2);
        List<DataParallelTraining.Outcome> sharded = DataParallelTraining.run(2, zero2, 2, 8, 2, DataType.BFLOAT16, 1e-2);
        for (int r = 0; r < 2; r++) {
            // float32 shard sums of per-pass means against the mean of bfloat16 sums: one bf16 step apart at most
            double d = DataParallelTraining.maxAbsDiff(sharded.get(r).params(), reference.get(r).params());
            assertTrue(d <= 1e-2, "bf16 ZeRO-2 differs from the distributed optimizer on rank " + r + " by " + d);
        }
    }

    /**
     * After every pass's reports no parameter holds a gradient any more: what a rank keeps between
     * passes is its shard of each bucket, a quarter of the gradients at DP4 (plus padding), where the
     * distributed optimizer keeps every full gradient until the step's end.
     */
    @Test
    void fullGradientsAreReleasedAsEachPassIsReportedAndOnlyShardsRemain() {
        InJvmWorld.run(4, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.of(4, 1, 1));
            NDManager m = rank.manager();
            long[] held = new long[2];
            long[] shards = new long[2];
            for (int mode = 0; mode < 2; mode++) {
                OptimizerConfig config = mode == 0 ? DISTRIBUTED : ZERO2;
                TinyMlp model = new TinyMlp(m, DataType.FLOAT32);
                DistributedDataParallel ddp = new DistributedDataParallel(model.params, groups, config, List.of());
                ddp.expectBackwardPasses(2);
                for (int pass = 0; pass < 2; pass++) {
                    backwardPass(model, ddp, groups.dataParallelRank(), pass, pass, m);
                    held[mode] = Math.max(held[mode], gradientBytes(model.params, m));
                }
                ddp.finishGradSync();
                for (int b = 0; b < ddp.bucketCount(); b++) {
                    shards[mode] += ddp.syncedShard(b).getShape().size() * 4;
                }
                if (mode == 1) {
                    for (Parameter p : model.params) {
                        assertNull(p.gradient(m), p + " still holds its gradient after the step's reductions");
                    }
                }
                ddp.zeroGrad();
                ddp.close();
                model.close();
            }
            long total = 4L * (TinyMlp.HIDDEN * TinyMlp.IN + TinyMlp.HIDDEN + TinyMlp.OUT * TinyMlp.HIDDEN + TinyMlp.OUT);
            assertEquals(total, held[0], "the distributed optimizer keeps every full gradient between passes");
            assertEquals(0, held[1], "ZeRO-2 keeps no full gradient between passes");
            assertEquals(shards[0], shards[1], "both end with the same shards");
            assertTrue(shards[1] <= total / 4 + 4 * 4 * 4, "shards " + shards[1] + " bytes of " + total);
            return null;
        });
    }

    @Test
    void twelveStepsKeepTheLiveArrayCountConstant() {
        InJvmWorld.run(2, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.of(2, 1, 1));
            NDManager m = rank.manager();
            TinyMlp model = new TinyMlp(m, DataType.FLOAT32);
            DistributedDataParallel ddp = new DistributedDataParallel(model.params, groups, ZERO2, List.of());
            MegatronOptimizer optimizer = Optimizers.create(model.params, ddp, groups, ZERO2);
            int baseline = -1;
            for (int step = 0; step < 12; step++) {
                ddp.expectBackwardPasses(2);
                for (int pass = 0; pass < 2; pass++) {
                    backwardPass(model, ddp, groups.dataParallelRank(), step, pass, m);
                }
                ddp.finishGradSync();
                optimizer.step(1e-3, 0.01);
                optimizer.zeroGrad();
                if (step == 1) {
                    baseline = NativeArrays.live(m);
                }
            }
            assertEquals(baseline, NativeArrays.live(m), "live native arrays after 12 steps");
            optimizer.close();
            ddp.close();
            model.close();
            assertEquals(0, NativeArrays.live(m), "everything released after close");
            return null;
        });
    }

    /**
     * A parameter reported for a second pass before its bucket completed the first (the bucket holds a parameter no
     * report covers, as the embedding's) leaves that bucket to finishGradSync; reports beyond the armed passes, and
     * strategies that cannot be built, are refused.
     */
    @Test
    void aBucketFirstPassNeverCompletedWaitsForTheSyncAndExtraReportsAreRefused() {
        InJvmWorld.run(2, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.of(2, 1, 1));
            Parameter a = Parameter.replicated("a", rank.manager().zeros(new Shape(3)));
            Parameter b = Parameter.replicated("b", rank.manager().zeros(new Shape(3)));
            DistributedDataParallel ddp = new DistributedDataParallel(List.of(a, b), groups,
                    ZERO2.toBuilder().bucketSizeBytes(1 << 20).build(), List.of());
            ddp.expectBackwardPasses(2);
            ddp.gradientsReady(List.of(a));
            ddp.gradientsReady(List.of(a)); // b, in a's bucket, was not reported in pass 1: the bucket waits for the sync
            IllegalStateException extra = assertThrows(IllegalStateException.class, () -> ddp.gradientsReady(List.of(a)));
            assertTrue(extra.getMessage().contains("reported ready 3 times, but the step was armed for 2"), extra.getMessage());
            ddp.close();
            a.close();
            b.close();
            return null;
        });
        IllegalArgumentException replicas = assertThrows(IllegalArgumentException.class, () -> OptimizerConfig.builder()
                .dataParallelShardingStrategy(DataParallelShardingStrategy.OPTIM_GRADS).build());
        assertEquals("data-parallel sharding strategy optim_grads shards the optimizer state: it needs the distributed"
                + " optimizer (useDistributedOptimizer=true)", replicas.getMessage());
        IllegalArgumentException zero3 = assertThrows(IllegalArgumentException.class, () -> OptimizerConfig.builder()
                .dataParallelShardingStrategy(DataParallelShardingStrategy.OPTIM_GRADS_PARAMS).build());
        assertTrue(zero3.getMessage().startsWith("data-parallel sharding strategy optim_grads_params shards the optimizer"),
                zero3.getMessage());
        IllegalArgumentException unknown = assertThrows(IllegalArgumentException.class,
                () -> DataParallelShardingStrategy.of("full_shard"));
        assertEquals("--data-parallel-sharding-strategy full_shard is not one of no_shard, optim, optim_grads,"
                + " optim_grads_params", unknown.getMessage());
    }

    /**
     * One micro-batch of two rows (rows {@code 4 * dpRank + 2 * pass} of step {@code step}'s batch),
     * its backward, and the reports a model's backward would make, last parameter first.
     */
    private static void backwardPass(TinyMlp model, DistributedDataParallel ddp, int dpRank, int step, int pass, NDManager m) {
        float[][] batch = TinyMlp.batch(step, 16);
        int from = dpRank * 4 + 2 * pass;
        model.forwardBackward(m, TinyMlp.rows(batch[0], TinyMlp.IN, from, 2), TinyMlp.rows(batch[1], TinyMlp.OUT, from, 2),
                2, 0.5);
        for (int i = model.params.size() - 1; i >= 0; i--) {
            ddp.gradientsReady(List.of(model.params.get(i)));
        }
    }

    private static long gradientBytes(List<Parameter> params, NDManager m) {
        long bytes = 0;
        try (NDManager temp = m.newSubManager()) {
            for (Parameter p : params) {
                NDArray g = p.gradient(temp);
                if (g != null) {
                    assertNotNull(g);
                    bytes += g.getShape().size() * g.getDataType().getNumOfBytes();
                }
            }
        }
        return bytes;
    }
}
