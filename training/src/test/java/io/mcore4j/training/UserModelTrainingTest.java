package io.mcore4j.training;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import ai.djl.nn.Activation;
import io.mcore4j.core.autograd.Cast;
import io.mcore4j.core.nn.AbstractModule;
import io.mcore4j.optimizer.LearningRateSchedule;
import io.mcore4j.optimizer.OptimizerConfig;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;
import io.mcore4j.tensorparallel.ColumnParallelLinear;
import io.mcore4j.tensorparallel.Initializers;
import io.mcore4j.tensorparallel.RowParallelLinear;
import io.mcore4j.tensorparallel.VocabParallelCrossEntropy;
import io.mcore4j.tensorparallel.VocabParallelEmbedding;

import java.util.List;

import org.junit.jupiter.api.Test;

/**
 * Acceptance 4 of the training-step issue: a downstream user's own model trained with the
 * {@code training} artifact in well under 50 lines (everything between the two markers), without
 * touching loss scaling, under fp16 with dynamic loss scaling; the same losses at TP2 as at TP1.
 */
class UserModelTrainingTest {

    // ---- a user's program starts here ----
    /** A tiny tensor-parallel language model: embedding, MLP, vocab-parallel output; its registered children give its parameters. */
    static final class TinyLm extends AbstractModule {
        final VocabParallelEmbedding embedding;
        final ColumnParallelLinear fc1;
        final RowParallelLinear fc2;
        final ColumnParallelLinear head;

        TinyLm(Communicator tp, NDManager m, DataType dtype) {
            embedding = registerModule("embedding.", VocabParallelEmbedding.builder(32, 16, tp).initializer(Initializers.normal(0.5, 1)).dtype(dtype).name("embedding").manager(m).build());
            fc1 = registerModule("fc1.", ColumnParallelLinear.builder(16, 64, tp).initializer(Initializers.normal(0.2, 2)).dtype(dtype).name("fc1").manager(m).build());
            fc2 = registerModule("fc2.", RowParallelLinear.builder(64, 16, tp).initializer(Initializers.normal(0.2, 3)).dtype(dtype).name("fc2").manager(m).build());
            head = registerModule("head.", ColumnParallelLinear.builder(16, 32, tp).initializer(Initializers.normal(0.2, 4)).dtype(dtype).name("head").manager(m).build());
        }
    }

    static List<Double> train(ProcessGroups groups, NDManager manager) {
        TinyLm lm = new TinyLm(groups.tp(), manager, DataType.FLOAT16);
        SingleStageModel model = new SingleStageModel(lm, (scope, batch) -> {
            NDArray h = lm.embedding.forward(scope, batch.tokens());
            h = lm.fc2.forward(scope, Activation.gelu(lm.fc1.forward(scope, h).output())).output();
            NDArray logits = lm.head.forward(scope, h).output();
            return Cast.apply(scope, VocabParallelCrossEntropy.lossPerToken(scope, groups.tp(), logits, batch.labels(), 0.0), DataType.FLOAT32).mean();
        });
        BatchSource data = (m, consumed, mb) -> {
            long[] tokens = new long[8 * 4];
            for (int i = 0; i < tokens.length; i++) {
                tokens[i] = (consumed + 5L * mb + i) % 31;
            }
            NDArray t = m.create(tokens, new Shape(8, 4)); // [s, b]
            return new MicroBatch(t, t.add(1));
        };
        OptimizerConfig adam = OptimizerConfig.builder().lr(1e-2).fp16(true).build();
        try (TrainStep step = TrainStep.builder(model, groups, manager).optimizer(adam).microBatchSize(4).seqLength(8).globalBatchSize(8).build()) {
            TrainingConfig config = new TrainingConfig(12, LearningRateSchedule.constant(1e-2), 0.0, 6, 0, 0, CheckpointConfig.NONE, 1);
            return TrainingLoop.builder(step, config, data).out(System.out).build().run().losses();
        } finally {
            model.close();
        }
    }
    // ---- a user's program ends here ----

    @Test
    void aUsersOwnModelTrainsAndGivesTheSameLossesAtTp2() {
        List<Double> serial = InJvmWorld.run(1, r -> train(r.groups(ParallelDims.of(1, 1, 1)), r.manager())).get(0);
        assertEquals(12, serial.size());
        assertTrue(serial.get(11) < 0.5 * serial.get(0), "the loss should fall: " + serial);
        List<List<Double>> tp2 = InJvmWorld.run(2, r -> train(r.groups(ParallelDims.of(2, 2, 1)), r.manager()));
        List<Double> logged = tp2.get(0);
        assertEquals(serial.size(), logged.size());
        for (int i = 0; i < serial.size(); i++) {
            // fp16 weights: TP2 splits the sums differently, so the losses agree to fp16 rounding
            assertEquals(serial.get(i), logged.get(i), 2e-3 * Math.abs(serial.get(i)), "iteration " + (i + 1));
        }
    }
}
