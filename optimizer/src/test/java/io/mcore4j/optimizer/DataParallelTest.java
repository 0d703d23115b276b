package io.mcore4j.optimizer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.types.DataType;

import ai.djl.ndarray.NDManager;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.List;

import org.junit.jupiter.api.Test;

/** Data-parallel training equals one rank with the whole batch (acceptance test 1). */
class DataParallelTest {
    private static final OptimizerConfig ADAMW = OptimizerConfig.builder().lr(1e-2).weightDecay(0.01).clipGrad(1.0).build();

    @Test
    void twoRanksWithMicroBatchBMatchOneRankWithBatch2B() {
        List<DataParallelTraining.Outcome> serial = DataParallelTraining.run(1, ADAMW, 3, 8, 1, DataType.FLOAT32, 1e-2);
        List<DataParallelTraining.Outcome> dp2 = DataParallelTraining.run(2, ADAMW, 3, 8, 1, DataType.FLOAT32, 1e-2);
        assertTrue(DataParallelTraining.maxAbsDiffFromStart(serial.get(0).params()) > 1e-3, "the parameters must move");
        for (DataParallelTraining.Outcome rank : dp2) {
            double d = DataParallelTraining.maxAbsDiff(rank.params(), serial.get(0).params());
            assertTrue(d <= 1e-6, "DP2 parameters differ from DP1 by " + d);
            for (int s = 0; s < 3; s++) {
                assertFalse(rank.steps().get(s).skipped());
                double expected = serial.get(0).steps().get(s).gradNorm();
                assertEquals(expected, rank.steps().get(s).gradNorm(), 1e-6 * Math.max(1, expected));
            }
        }
    }

    @Test
    void gradientAccumulationOverMicroBatchesSyncsOnceAndMatches() {
        List<DataParallelTraining.Outcome> serial = DataParallelTraining.run(1, ADAMW, 3, 8, 1, DataType.FLOAT32, 1e-2);
        List<DataParallelTraining.Outcome> dp2 = DataParallelTraining.run(2, ADAMW, 3, 8, 2, DataType.FLOAT32, 1e-2);
        for (DataParallelTraining.Outcome rank : dp2) {
            double d = DataParallelTraining.maxAbsDiff(rank.params(), serial.get(0).params());
            assertTrue(d <= 1e-6, "DP2 with 2 micro-batches differs from DP1 by " + d);
        }
    }

    @Test
    void manySmallBucketsAndAveragingInTheCollectiveGiveTheSameResultAtDp4() {
        OptimizerConfig config = ADAMW.toBuilder().bucketSizeBytes(48).averageInCollective(true).build();
        List<DataParallelTraining.Outcome> serial = DataParallelTraining.run(1, ADAMW, 3, 8, 1, DataType.FLOAT32, 1e-2);
        List<DataParallelTraining.Outcome> dp4 = DataParallelTraining.run(4, config, 3, 8, 1, DataType.FLOAT32, 1e-2);
        for (DataParallelTraining.Outcome rank : dp4) {
            double d = DataParallelTraining.maxAbsDiff(rank.params(), serial.get(0).params());
            assertTrue(d <= 1e-6, "DP4 with small buckets differs from DP1 by " + d);
        }
    }

    @Test
    void overlappingTheReductionWithBackwardGivesExactlyTheSameTraining() {
        for (boolean distributed : new boolean[] {false, true}) {
            OptimizerConfig plain = ADAMW.toBuilder().bucketSizeBytes(48).useDistributedOptimizer(distributed).build();
            OptimizerConfig overlapped = plain.toBuilder().overlapGradReduce(true).build();
            List<DataParallelTraining.Outcome> reference = DataParallelTraining.run(4, plain, 3, 8, 2, DataType.FLOAT32, 1e-2);
            List<DataParallelTraining.Outcome> dp4 = DataParallelTraining.run(4, overlapped, 3, 8, 2, DataType.FLOAT32, 1e-2);
            for (int r = 0; r < 4; r++) {
                double d = DataParallelTraining.maxAbsDiff(dp4.get(r).params(), reference.get(r).params());
                assertEquals(0.0, d, "overlapped reduction (distributed optimizer " + distributed + ") differs on rank " + r);
                assertEquals(reference.get(r).losses(), dp4.get(r).losses());
            }
        }
    }

    @Test
    void reportingMorePassesThanArmedIsRefused() {
        OptimizerConfig overlapped = ADAMW.toBuilder().overlapGradReduce(true).build();
        InJvmWorld.run(2, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.of(2, 1, 1));
            Parameter p = Parameter.replicated("w", rank.manager().zeros(new ai.djl.ndarray.types.Shape(3)));
            DistributedDataParallel ddp = new DistributedDataParallel(List.of(p), groups, overlapped, List.of());
            assertThrows(IllegalArgumentException.class, () -> ddp.expectBackwardPasses(0));
            ddp.expectBackwardPasses(1);
            SplitModel.addGradient(p, new float[] {1, 2, 3}, rank.manager());
            ddp.gradientsReady(List.of(p)); // completes the only bucket: its all-reduce starts here
            IllegalStateException twice = assertThrows(IllegalStateException.class, () -> ddp.gradientsReady(List.of(p)));
            assertTrue(twice.getMessage().contains("armed for 1"), twice.getMessage());
            ddp.finishGradSync();
            assertTrue(java.util.Arrays.equals(new float[] {1, 2, 3}, p.gradient(rank.manager()).toFloatArray()));
            ddp.zeroGrad();
            ddp.close();
            p.close();
            return null;
        });
    }

    @Test
    void afterSyncEveryGradHoldsTheDataParallelAverageAndMisuseIsRefused() {
        InJvmWorld.run(2, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.of(2, 1, 1));
            NDManager m = rank.manager();
            Parameter p = Parameter.replicated("w", m.zeros(new ai.djl.ndarray.types.Shape(3)));
            DistributedDataParallel ddp = new DistributedDataParallel(List.of(p), groups, ADAMW, List.of());
            MegatronOptimizer optimizer = Optimizers.create(List.of(p), ddp, groups, ADAMW);
            IllegalStateException early = assertThrows(IllegalStateException.class, () -> optimizer.step(1e-3));
            assertTrue(early.getMessage().contains("finishGradSync"), early.getMessage());
            float r = rank.rank();
            SplitModel.addGradient(p, new float[] {1 + r, 10 * r, -r}, m);
            ddp.finishGradSync();
            assertTrue(java.util.Arrays.equals(new float[] {1.5f, 5f, -0.5f}, p.gradient(m).toFloatArray()),
                    java.util.Arrays.toString(p.gradient(m).toFloatArray()));
            IllegalStateException twice = assertThrows(IllegalStateException.class, ddp::finishGradSync);
            assertTrue(twice.getMessage().contains("zeroGrad"), twice.getMessage());
            optimizer.step(1e-3);
            IllegalStateException again = assertThrows(IllegalStateException.class, () -> optimizer.step(1e-3));
            assertTrue(again.getMessage().contains("already consumed"), again.getMessage());
            optimizer.zeroGrad();
            assertFalse(ddp.isGradSynced());
            IllegalArgumentException mismatch = assertThrows(IllegalArgumentException.class, () -> Optimizers.create(
                    List.of(p), ddp, groups, ADAMW.toBuilder().useDistributedOptimizer(true).build()));
            assertTrue(mismatch.getMessage().contains("useDistributedOptimizer=true"), mismatch.getMessage());
            optimizer.close();
            ddp.close();
            p.close();
            return null;
        });
    }
}
