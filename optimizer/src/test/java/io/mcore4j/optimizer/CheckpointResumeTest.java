package io.mcore4j.optimizer;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.List;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * Optimizer state saved after 3 steps and loaded into a fresh optimizer continues exactly like
 * an uninterrupted run: bit for bit under the same layout, within float tolerance under another
 * data-parallel size or with the distributed optimizer switched off.
 */
class CheckpointResumeTest {
    private static final int GLOBAL_BATCH = 8;
    private static final String PREFIX = "optimizer.";
    private static final ParameterLayout LAYOUT = ParameterLayout.byKey(p -> p.name());

    /** What a run ends with on each rank: parameters and the loss scale. */
    private record End(List<float[]> params, double lossScale) {}

    /**
     * Trains steps {@code [from, to)} at DP {@code world} from the given weights, optionally loading
     * the optimizer state from {@code load} first and saving it into {@code save} at the end.
     */
    private static List<End> train(int world, OptimizerConfig config, DataType dtype, List<float[]> weights, int from,
                                   int to, InMemoryCheckpoint load, InMemoryCheckpoint save) {
        return InJvmWorld.run(world, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.of(world, 1, 1));
            TinyMlp model = new TinyMlp(rank.manager(), dtype, weights);
            DistributedDataParallel ddp = new DistributedDataParallel(model.params, groups, config, List.of());
            MegatronOptimizer optimizer = Optimizers.create(model.params, ddp, groups, config, LAYOUT);
            if (load != null) {
                try (NDManager temp = rank.manager().newSubManager()) {
                    List<ShardedTensor> wanted = optimizer.shardedState(PREFIX, LAYOUT, temp);
                    optimizer.loadShardedState(PREFIX, load.load(wanted, temp));
                }
            }
            int perRank = GLOBAL_BATCH / world;
            for (int step = from; step < to; step++) {
                float[][] batch = TinyMlp.batch(step, GLOBAL_BATCH);
                int dp = groups.dataParallelRank();
                model.forwardBackward(rank.manager(), TinyMlp.rows(batch[0], TinyMlp.IN, dp * perRank, perRank),
                        TinyMlp.rows(batch[1], TinyMlp.OUT, dp * perRank, perRank), perRank, optimizer.lossScale());
                ddp.finishGradSync();
                optimizer.step(1e-2, 0.02);
                optimizer.zeroGrad();
            }
            if (save != null) {
                save.save(optimizer.shardedState(PREFIX));
            }
            End end = new End(model.values(), optimizer.lossScale());
            optimizer.close();
            ddp.close();
            model.close();
            return end;
        });
    }

    @ParameterizedTest
    @CsvSource({"false, false", "true, false", "false, true", "true, true"})
    void resumeUnderTheSameLayoutIsBitForBit(boolean distributed, boolean fp16) {
        DataType dtype = fp16 ? DataType.FLOAT16 : DataType.FLOAT32;
        // a small window makes the loss scale change between save and resume
        OptimizerConfig config = OptimizerConfig.builder().fp16(fp16).initialLossScale(256).lossScaleWindow(2)
                .useDistributedOptimizer(distributed).bucketSizeBytes(100).build();
        List<float[]> start = TinyMlp.initialValues();
        List<End> straight = train(2, config, dtype, start, 0, 5, null, null);

        InMemoryCheckpoint checkpoint = new InMemoryCheckpoint();
        List<End> first = train(2, config, dtype, start, 0, 3, null, checkpoint);
        checkpoint.assertCompleteAndDisjoint();
        assertTrue(checkpoint.keys().contains(PREFIX + "fc1.weight.exp_avg_sq"), checkpoint.keys().toString());
        List<End> resumed = train(2, config, dtype, first.get(0).params(), 3, 5, checkpoint, null);
        for (int r = 0; r < 2; r++) {
            assertEquals(straight.get(r).lossScale(), resumed.get(r).lossScale());
            for (int i = 0; i < TinyMlp.NAMES.size(); i++) {
                assertArrayEquals(straight.get(r).params().get(i), resumed.get(r).params().get(i),
                        "rank " + r + " " + TinyMlp.NAMES.get(i) + " must match bit for bit");
            }
        }
        if (fp16) {
            assertTrue(straight.get(0).lossScale() > 256, "the loss scale should have grown");
        }
    }

    @Test
    void stateSavedByTheDistributedOptimizerAtDp2LoadsAtDp4AndIntoThePlainOptimizer() {
        OptimizerConfig sharded = OptimizerConfig.builder().useDistributedOptimizer(true).bucketSizeBytes(100).build();
        OptimizerConfig plain = sharded.toBuilder().useDistributedOptimizer(false).bucketSizeBytes(40_000_000L).build();
        List<float[]> start = TinyMlp.initialValues();
        List<End> straight = train(2, sharded, DataType.FLOAT32, start, 0, 5, null, null);
        InMemoryCheckpoint checkpoint = new InMemoryCheckpoint();
        List<End> first = train(2, sharded, DataType.FLOAT32, start, 0, 3, null, checkpoint);
        checkpoint.assertCompleteAndDisjoint();

        List<End> dp4 = train(4, sharded, DataType.FLOAT32, first.get(0).params(), 3, 5, checkpoint, null);
        List<End> dp1 = train(1, plain, DataType.FLOAT32, first.get(0).params(), 3, 5, checkpoint, null);
        // without the moments the continuation would differ: Adam's first steps are much larger
        List<End> cold = train(1, plain, DataType.FLOAT32, first.get(0).params(), 3, 5, null, null);
        double d4 = DataParallelTraining.maxAbsDiff(dp4.get(3).params(), straight.get(0).params());
        double d1 = DataParallelTraining.maxAbsDiff(dp1.get(0).params(), straight.get(0).params());
        double dCold = DataParallelTraining.maxAbsDiff(cold.get(0).params(), straight.get(0).params());
        assertTrue(d4 <= 1e-6, "DP4 resume differs by " + d4);
        assertTrue(d1 <= 1e-6, "plain DP1 resume differs by " + d1);
        assertTrue(dCold > 1e-4, "a resume without optimizer state should differ, but differs by only " + dCold);
    }

    @Test
    void aMissingPieceIsReportedByKeyAndOffset() {
        OptimizerConfig config = OptimizerConfig.builder().build();
        InJvmWorld.run(1, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.of(1, 1, 1));
            TinyMlp model = new TinyMlp(rank.manager(), DataType.FLOAT32);
            DistributedDataParallel ddp = new DistributedDataParallel(model.params, groups, config, List.of());
            MegatronOptimizer optimizer = Optimizers.create(model.params, ddp, groups, config, LAYOUT);
            List<ShardedTensor> all = optimizer.shardedState(PREFIX);
            List<ShardedTensor> partial = all.stream().filter(t -> !t.key().equals(PREFIX + "fc2.bias.exp_avg")).toList();
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> optimizer.loadShardedState(PREFIX, partial));
            assertTrue(e.getMessage().contains("optimizer.fc2.bias.exp_avg at global offset [0]"), e.getMessage());
            optimizer.close();
            ddp.close();
            model.close();
            return null;
        });
    }
}
