package io.mcore4j.models.gpt;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.transformer.LayerSpec;
import io.mcore4j.moe.MoeAuxLossTracker;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;
import io.mcore4j.tensorparallel.MlpActivation;

import java.util.Arrays;
import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.Test;

/**
 * Multi-token prediction ({@code --mtp-num-layers}): at TP2, with and without sequence parallelism, the main loss, each depth's loss and every gradient
 * (the depths' included) equal TP1's; with {@code --mtp-loss-scaling-factor 0} the main loss and every main weight's
 * gradient equal a model's without the depths, while a positive factor changes the gradients and not the returned
 * (main) loss; the layouts it does not run on are refused by name.
 */
class MultiTokenPredictionTest {
    private static final int SEQ = 8;
    private static final int BATCH = 2;

    private static TransformerConfig.Builder base() {
        return TransformerConfig.builder(2, 32, 4, 64).maxSequenceLength(SEQ).dropout(0, 0)
                .positionEmbedding(TransformerConfig.PositionEmbedding.ROPE)
                .normalization(TransformerConfig.Normalization.RMS_NORM, 1e-6).activation(MlpActivation.SWIGLU)
                .addBiasLinear(false).queryGroups(2);
    }

    @Test
    void tensorParallelMatchesSerial() {
        TransformerConfig c = base().mtp(new TransformerConfig.MtpSettings(2, 0.3)).build();
        Result ref = run(c, 1);
        for (TransformerConfig parallel : List.of(c, c.toBuilder().sequenceParallel(true).build())) {
            assertMatches(ref, run(parallel, 2), "SP=" + parallel.sequenceParallel());
        }
    }

    private static void assertMatches(Result ref, Result tp2, String what) {
        assertEquals(ref.loss, tp2.loss, 1e-5 * Math.abs(ref.loss), "main loss with " + what);
        assertEquals(2, ref.mtpLosses.length);
        for (int k = 0; k < 2; k++) {
            assertTrue(ref.mtpLosses[k] > 1, "depth " + (k + 1) + " loss " + ref.mtpLosses[k]);
            assertEquals(ref.mtpLosses[k], tp2.mtpLosses[k], 1e-5 * ref.mtpLosses[k], "depth " + (k + 1) + " loss");
        }
        int depthWeights = 0;
        for (String key : tp2.gradients.keySet()) {
            assertClose(ref.gradients.get(key), tp2.gradients.get(key), 1e-5, key + " with " + what);
            if (key.startsWith("mtp.layers.")) {
                depthWeights++;
                assertTrue(Arrays.stream(ref.gradients.get(key)).anyMatch(v -> v != 0), key + " got no gradient");
            }
        }
        // per depth: enorm, hnorm, eh_proj, final_layernorm, and the layer's two norms, qkv, proj and fc2 (fused
        // SwiGLU fc1 is described in strided pieces and skipped)
        assertEquals(2 * 9, depthWeights, "depth weights compared: " + tp2.gradients.keySet());
        assertTrue(tp2.gradients.containsKey("mtp.layers.1.eh_proj.weight"), tp2.gradients.keySet().toString());
    }

    @Test
    void zeroFactorLeavesTheMainModelAlone() {
        TransformerConfig plain = base().build();
        Result without = run(plain, 1);
        Result zero = run(plain.toBuilder().mtp(new TransformerConfig.MtpSettings(1, 0)).build(), 1);
        Result weighted = run(plain.toBuilder().mtp(new TransformerConfig.MtpSettings(1, 0.5)).build(), 1);
        assertEquals(without.loss, zero.loss, 0, "main loss with factor 0");
        assertEquals(without.loss, weighted.loss, 0, "the returned loss is the main model's");
        double changed = 0;
        for (Map.Entry<String, double[]> e : without.gradients.entrySet()) {
            assertClose(e.getValue(), zero.gradients.get(e.getKey()), 0, e.getKey() + " with factor 0");
            double[] w = weighted.gradients.get(e.getKey());
            for (int i = 0; i < w.length; i++) {
                changed = Math.max(changed, Math.abs(w[i] - e.getValue()[i]));
            }
        }
        assertTrue(changed > 1e-4, "factor 0.5 changed the main gradients by only " + changed);
        assertTrue(zero.gradients.keySet().stream().anyMatch(k -> k.startsWith("mtp.layers.0.")));
    }

    @Test
    void refusesLayoutsByName() {
        TransformerConfig c = base().mtp(new TransformerConfig.MtpSettings(1, 0.1)).build();
        IllegalArgumentException pp = assertThrows(IllegalArgumentException.class,
                () -> c.validate(ParallelDims.of(2, 1, 2)));
        assertTrue(pp.getMessage().contains("--mtp-num-layers 1 runs on one pipeline stage"), pp.getMessage());
        IllegalArgumentException cp = assertThrows(IllegalArgumentException.class,
                () -> c.validate(ParallelDims.builder(2).contextParallel(2).build()));
        assertTrue(cp.getMessage().contains("--context-parallel-size 2"), cp.getMessage());
        IllegalArgumentException depth = assertThrows(IllegalArgumentException.class,
                () -> new TransformerConfig.MtpSettings(0, 0.1));
        assertEquals("--mtp-num-layers 0 must be at least 1", depth.getMessage());
        IllegalArgumentException factor = assertThrows(IllegalArgumentException.class,
                () -> new TransformerConfig.MtpSettings(1, -1));
        assertTrue(factor.getMessage().startsWith("--mtp-loss-scaling-factor -1.0"), factor.getMessage());
    }

    static void assertClose(double[] a, double[] b, double tolerance, String what) {
        for (int i = 0; i < a.length; i++) {
            assertEquals(a[i], b[i], tolerance, what + "[" + i + "]");
        }
    }

    private record Result(double loss, double[] mtpLosses, Map<String, double[]> gradients) {}

    /** One forward/backward at TP {@code tp}: the returned loss, each depth's loss, every gradient reassembled. */
    private static Result run(TransformerConfig config, int tp) {
        List<Result> perRank = InJvmWorld.run(tp, rank -> {
            ProcessGroups groups = GlobalGradients.groups(rank, tp, 1);
            NDManager m = rank.manager();
            GptModel model = GlobalGradients.twoLayers(config, groups, m, LayerSpec.tensorParallel());
            double[] mtpLosses = new double[config.mtp() == null ? 0 : config.mtp().numLayers()];
            try (MoeAuxLossTracker tracker = new MoeAuxLossTracker(m)) {
                if (model.mtp() != null) {
                    model.mtp().trackLosses(tracker);
                }
                double loss;
                try (AutogradScope scope = AutogradScope.open(m)) {
                    NDArray[] data = TokenBatches.shifted(scope.manager(), config.vocabSize(), SEQ, BATCH, 7, 3);
                    NDArray l = model.forward(scope, data[0], null, data[1]);
                    loss = DataTypes.toType(l, DataType.FLOAT64, false).getDouble();
                    scope.backward(l);
                }
                for (int k = 0; k < mtpLosses.length; k++) {
                    mtpLosses[k] = tracker.localValues(MultiTokenPrediction.lossName(k + 1))[0];
                }
                return new Result(loss, mtpLosses, GlobalGradients.averagedOverContextParallel(model, groups, m));
            }
        });
        return perRank.get(0);
    }
}
