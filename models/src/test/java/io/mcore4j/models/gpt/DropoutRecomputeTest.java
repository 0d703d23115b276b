package io.mcore4j.models.gpt;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.transformer.LayerSpec;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.Test;

/**
 * Dropout follows the pass's training flag, not grad mode: with hidden and attention dropout, a
 * training pass with selective or full recompute computes the same loss (from the same masks) and
 * the same gradients as one without recompute, and that loss differs from the loss without dropout;
 * an evaluation pass applies no dropout.
 */
class DropoutRecomputeTest {
    private static final int SEQ = 8;
    private static final int BATCH = 2;
    private static final double DROPOUT = 0.1;

    private static TransformerConfig.Builder base() {
        return TransformerConfig.builder(2, 32, 4, 64).maxSequenceLength(SEQ);
    }

    @Test
    void recomputeSeesTheSameDropoutInLossAndGradients() {
        for (int tp : new int[] {1, 2}) {
            for (boolean sequenceParallel : tp == 1 ? new boolean[] {false} : new boolean[] {false, true}) {
                String layout = "TP" + tp + (sequenceParallel ? " SP" : "");
                TransformerConfig.Builder dropped = base().dropout(DROPOUT, DROPOUT).sequenceParallel(sequenceParallel);
                List<Result> none = run(dropped.build(), tp, true);
                List<Result> noDropout = run(base().dropout(0, 0).sequenceParallel(sequenceParallel).build(), tp, true);
                double lossNone = none.get(0).loss;
                // the dropout must show in the loss, otherwise equal losses below would prove nothing
                assertTrue(Math.abs(lossNone - noDropout.get(0).loss) > 1e-4,
                        "dropout did not change the loss at " + layout + ": " + lossNone + " vs " + noDropout.get(0).loss);
                for (TransformerConfig.Recompute mode : List.of(TransformerConfig.Recompute.SELECTIVE,
                        TransformerConfig.Recompute.FULL)) {
                    List<Result> recomputed = run(dropped.recompute(mode).build(), tp, true);
                    for (int rank = 0; rank < tp; rank++) {
                        Result a = none.get(rank);
                        Result b = recomputed.get(rank);
                        String where = mode + " at " + layout + " rank " + rank;
                        assertEquals(a.loss, b.loss, 0, "loss with " + where);
                        assertEquals(a.gradients.keySet(), b.gradients.keySet());
                        double largest = 0;
                        for (Map.Entry<String, double[]> e : a.gradients.entrySet()) {
                            double[] ga = e.getValue();
                            double[] gb = b.gradients.get(e.getKey());
                            for (int i = 0; i < ga.length; i++) {
                                assertEquals(ga[i], gb[i], 1e-6, e.getKey() + "[" + i + "] with " + where);
                                largest = Math.max(largest, Math.abs(ga[i]));
                            }
                        }
                        assertTrue(largest > 1e-3, "gradients vanished with " + where);
                    }
                }
                // the gradients too must carry the dropout: they differ from the gradients without it
                assertTrue(maxDifference(none.get(0), noDropout.get(0)) > 1e-4, "dropout did not change the gradients at " + layout);
            }
        }
    }

    /** Evaluation (a no-grad scope) applies no dropout, with or without recompute configured. */
    @Test
    void evaluationAppliesNoDropout() {
        double reference = run(base().dropout(0, 0).build(), 1, false).get(0).loss;
        for (TransformerConfig.Recompute mode : TransformerConfig.Recompute.values()) {
            double evaluated = run(base().dropout(DROPOUT, DROPOUT).recompute(mode).build(), 1, false).get(0).loss;
            assertEquals(reference, evaluated, 0, "evaluation loss with dropout configured and " + mode + " recompute");
        }
        double trained = run(base().dropout(DROPOUT, DROPOUT).build(), 1, true).get(0).loss;
        assertTrue(Math.abs(trained - reference) > 1e-4, "the training pass applied no dropout");
    }

    private static double maxDifference(Result a, Result b) {
        double diff = 0;
        for (Map.Entry<String, double[]> e : a.gradients.entrySet()) {
            double[] ga = e.getValue();
            double[] gb = b.gradients.get(e.getKey());
            for (int i = 0; i < ga.length; i++) {
                diff = Math.max(diff, Math.abs(ga[i] - gb[i]));
            }
        }
        return diff;
    }

    /** A rank's loss and its local gradients by parameter key (empty for an evaluation pass). */
    private record Result(double loss, Map<String, double[]> gradients) {}

    /** One pass per rank with seed 42: training (forward and backward) or evaluation (forward only). */
    private static List<Result> run(TransformerConfig config, int tp, boolean training) {
        return InJvmWorld.run(tp, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.of(tp, tp, 1));
            NDManager m = rank.manager();
            GptModel model = GptModel.build(ModelContext.create(config, groups, m, new SeedScheme(42)),
                    LayerSpec.tensorParallel(), new int[] {0, 1}, true, true);
            double loss;
            try (AutogradScope scope = training ? AutogradScope.open(m) : AutogradScope.openNoGrad(m)) {
                NDArray[] data = TokenBatches.shifted(scope.manager(), config.vocabSize(), SEQ, BATCH, 7, 3);
                NDArray l = model.forward(scope, data[0], null, data[1]);
                loss = l.toType(DataType.FLOAT64, false).getDouble();
                if (training) {
                    scope.backward(l);
                }
            }
            Map<String, double[]> gradients = new LinkedHashMap<>();
            if (training) {
                for (Map.Entry<String, Parameter> e : model.namedParameters("").entrySet()) {
                    NDArray g = Tensors.gradientOrZeros(e.getValue().data(), m);
                    gradients.put(e.getKey(), g.toType(DataType.FLOAT64, false).toDoubleArray());
                    g.close();
                }
            }
            return new Result(loss, gradients);
        });
    }
}
