package io.mcore4j.training;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.autograd.Cast;
import io.mcore4j.optimizer.LearningRateSchedule;
import io.mcore4j.optimizer.OptimizerConfig;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;
import io.mcore4j.tensorparallel.VocabParallelCrossEntropy;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

import org.junit.jupiter.api.Test;

/**
 * A step's loss stays on the device until it is read ({@link TrainStepResult}): the loop reads a logged
 * window's losses when it logs, and the figures are those of reading every step at once.
 */
class DeferredLossTest {

    private static final int ITERATIONS = 10;

    /**
     * Trains a tiny fp16 model (dynamic loss scale 2^16) with the loop, logging every 4 iterations: every
     * data-parallel replica reads the same micro-batches, {@code microBatches} of 4 samples per iteration.
     */
    private static List<Double> train(ProcessGroups groups, NDManager manager, int microBatches,
                                      TrainingLoop.IterationListener listener) {
        UserModelTrainingTest.TinyLm lm = new UserModelTrainingTest.TinyLm(groups.tp(), manager, DataType.FLOAT16);
        SingleStageModel model = new SingleStageModel(lm, (scope, batch) -> Cast.apply(scope, VocabParallelCrossEntropy
                .lossPerToken(scope, groups.tp(), lm.head.forward(scope, lm.embedding.forward(scope, batch.tokens())).output(),
                        batch.labels(), 0.0), DataType.FLOAT32).mean());
        BatchSource data = (m, consumed, mb) -> {
            long step = consumed / (4L * microBatches * groups.dims().dataParallel());
            long[] tokens = new long[6 * 4];
            for (int i = 0; i < tokens.length; i++) {
                tokens[i] = (7 * step + 3L * mb + i * i) % 29;
            }
            NDArray t = m.create(tokens, new Shape(6, 4));
            return new MicroBatch(t, t.add(2));
        };
        OptimizerConfig adam = OptimizerConfig.builder().lr(2e-2).fp16(true).build();
        try (TrainStep step = TrainStep.builder(model, groups, manager).optimizer(adam).microBatchSize(4).seqLength(6)
                .globalBatchSize(4L * microBatches * groups.dims().dataParallel()).build()) {
            TrainingConfig config = new TrainingConfig(ITERATIONS, LearningRateSchedule.constant(2e-2), 0.0, 4, 0, 0,
                    CheckpointConfig.NONE, 1);
            return TrainingLoop.builder(step, config, data).out(System.out).listener(listener).build().run().losses();
        } finally {
            model.close();
        }
    }

    @Test
    void theLoopReadsEachWindowsLossesWhenItLogsAndReportsTheSameLossesAsReadingEveryStep() {
        List<List<Double>> runs = InJvmWorld.run(1, r -> {
            ProcessGroups groups = r.groups(ParallelDims.of(1, 1, 1));
            List<Boolean> unreadAtStepEnd = new ArrayList<>();
            List<Double> deferred = train(groups, r.manager(), 3, (iteration, result) -> unreadAtStepEnd.add(!result.lossRead()));
            assertEquals(Collections.nCopies(ITERATIONS, true), unreadAtStepEnd, "a loss was read during its step");
            List<Double> eager = new ArrayList<>();
            List<Double> logged = train(groups, r.manager(), 3, (iteration, result) -> eager.add(result.loss()));
            assertEquals(eager, logged, "the loop logged other losses than its steps returned");
            return List.of(deferred, logged);
        }).get(0);
        assertEquals(ITERATIONS, runs.get(0).size());
        assertTrue(runs.get(0).get(ITERATIONS - 1) < runs.get(0).get(0), "the loss should fall: " + runs.get(0));
        assertEquals(runs.get(1), runs.get(0), "losses read at the log interval differ from losses read at every step");
    }

    /**
     * Over two data-parallel replicas the step's loss is formed and averaged on the device (float64); with
     * the same micro-batches on both replicas it must be the one-replica run's loss, formed on the host,
     * bit for bit: 3 micro-batches (a mean that does not divide exactly) and loss scale 2^16.
     */
    @Test
    void theDataParallelLossFormedOnTheDeviceIsTheOneReplicaHostLossExactly() {
        List<Double> serial = InJvmWorld.run(1, r -> train(r.groups(ParallelDims.of(1, 1, 1)), r.manager(), 3, null)).get(0);
        List<List<Double>> dp2 = InJvmWorld.run(2, r -> train(r.groups(ParallelDims.of(2, 1, 1)), r.manager(), 3, null));
        assertEquals(ITERATIONS, serial.size());
        assertEquals(serial, dp2.get(0));
        assertTrue(dp2.get(1).isEmpty(), "only data-parallel rank 0 logs");
    }

    @Test
    void aLossLeftUnreadUntilItsStepClosesCannotBeReadAfterwards() {
        InJvmWorld.run(1, r -> {
            ProcessGroups groups = r.groups(ParallelDims.of(1, 1, 1));
            UserModelTrainingTest.TinyLm lm = new UserModelTrainingTest.TinyLm(groups.tp(), r.manager(), DataType.FLOAT32);
            SingleStageModel model = new SingleStageModel(lm, (scope, batch) ->
                    lm.head.forward(scope, lm.embedding.forward(scope, batch.tokens())).output().mean());
            BatchSource data = (m, consumed, mb) -> {
                NDArray t = m.create(new long[] {1, 2, 3, 4}, new Shape(2, 2));
                return new MicroBatch(t, t);
            };
            TrainStepResult result;
            try (TrainStep step = TrainStep.builder(model, groups, r.manager())
                    .optimizer(OptimizerConfig.builder().lr(1e-2).build()).microBatchSize(2).seqLength(2).globalBatchSize(4).build()) {
                result = step.run(1e-2, 0, data, 0);
                assertFalse(result.lossRead());
            } finally {
                model.close();
            }
            IllegalStateException e = assertThrows(IllegalStateException.class, result::loss);
            assertEquals("the step's loss was released with its TrainStep before it was read:"
                    + " read TrainStepResult.loss() before closing the step", e.getMessage());
            return null;
        });
    }

    @Test
    void aResultMadeWithALossHoldsItAsRead() {
        TrainStepResult r = new TrainStepResult(2.5, 1, 1, false, 0, 8, 64, 0.1, null);
        assertTrue(r.lossRead());
        assertEquals(2.5, r.loss());
    }
}
