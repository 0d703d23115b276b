package io.mcore4j.hf;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import com.google.gson.JsonArray;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.gpt.GptModel;
import io.mcore4j.models.gpt.MultiTokenPrediction;
import io.mcore4j.models.transformer.LayerSpec;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.moe.MoeAuxLossTracker;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.inprocess.InJvmWorld;
import io.mcore4j.tensorparallel.MlpActivation;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.Map;

import org.junit.jupiter.api.Test;

/**
 * mcore4j's multi-token prediction against a plain torch implementation written from the semantics
 * ({@code scripts/hf/make_mtp_fixture.py}: two layers, grouped-query attention with RoPE, SwiGLU, RMSNorm, tied
 * embedding, two depths, a loss mask with zeros, factor 0.3, float64): on the same weights the main loss and each
 * depth's loss agree within 1e-5 relatively, and the gradients of the whole objective (main loss plus
 * {@code factor / D} times the depths' losses, which backward of the returned main loss gives) within 1e-5 of their
 * scale, for the embedding (read by the main model and every depth), a depth's projection, norm and attention.
 */
class MultiTokenPredictionReferenceTest {
    private static final Path DIR = Fixtures.dir("llama").getParent().resolve("mtp_reference");

    @Test
    void lossesAndGradientsMatchTheTorchReference() throws IOException {
        JsonObject ref = JsonParser.parseString(Files.readString(DIR.resolve("reference.json"), StandardCharsets.UTF_8))
                .getAsJsonObject();
        TransformerConfig c = TransformerConfig.builder(ref.get("layers").getAsInt(), ref.get("hidden").getAsInt(),
                        ref.get("heads").getAsInt(), ref.get("vocab").getAsInt())
                .queryGroups(ref.get("groups").getAsInt()).maxSequenceLength(64).dropout(0, 0)
                .normalization(TransformerConfig.Normalization.RMS_NORM, ref.get("eps").getAsDouble())
                .positionEmbedding(TransformerConfig.PositionEmbedding.ROPE).rotary(ref.get("rotary_base").getAsDouble(), 1)
                .activation(MlpActivation.SWIGLU).addBiasLinear(false)
                .mtp(new TransformerConfig.MtpSettings(ref.get("depths").getAsInt(), ref.get("factor").getAsDouble())).build();
        long[][] tokens = longRows(ref.getAsJsonArray("tokens"));
        long[][] labels = longRows(ref.getAsJsonArray("labels"));
        float[] mask = flatten(Fixtures.floatRows(ref.getAsJsonArray("loss_mask")));
        int s = tokens.length;
        int b = tokens[0].length;
        Result r = InJvmWorld.run(1, rank -> {
            NDManager m = rank.manager();
            GptModel model = GptModel.build(ModelContext.create(c, rank.groups(ParallelDims.of(1, 1, 1)), m,
                    new SeedScheme(1)), LayerSpec.tensorParallel(), new int[] {0, 1}, true, true);
            try (SafetensorsFile weights = SafetensorsFile.open(DIR.resolve("weights.safetensors"));
                 MoeAuxLossTracker tracker = new MoeAuxLossTracker(m)) {
                for (ShardedTensor piece : model.shardedState("")) {
                    long[] shape = piece.data().getShape().getShape();
                    long[] at = piece.globalOffset();
                    float[] values = weights.read(piece.key(), at[0], shape[0], shape.length == 1 ? 0 : at[1],
                            shape.length == 1 ? 1 : shape[1]);
                    Tensors.copyInto(piece.data(), m.create(values, new Shape(shape)));
                }
                model.mtp().trackLosses(tracker);
                double loss;
                try (AutogradScope scope = AutogradScope.open(m)) {
                    NDManager sm = scope.manager();
                    NDArray l = model.forward(scope, sm.create(flatten(tokens), new Shape(s, b)),
                            null, sm.create(flatten(labels), new Shape(s, b)), sm.create(mask, new Shape(s, b)));
                    loss = l.getFloat();
                    scope.backward(l);
                }
                double[] depths = new double[c.mtp().numLayers()];
                for (int k = 0; k < depths.length; k++) {
                    depths[k] = tracker.localValues(MultiTokenPrediction.lossName(k + 1))[0];
                }
                Map<String, float[]> grads = new LinkedHashMap<>();
                Map<NDArray, String> keys = new IdentityHashMap<>();
                model.shardedState("").forEach(t -> keys.put(t.data(), t.key()));
                for (Parameter p : model.parameters()) {
                    grads.put(keys.get(p.data()), Tensors.gradientOrZeros(p.data(), m).toFloatArray());
                }
                return new Result(loss, depths, grads);
            }
        }).get(0);
        double main = ref.get("main_loss").getAsDouble();
        assertEquals(main, r.loss, 1e-5 * main, "main loss");
        JsonArray depthLosses = ref.getAsJsonArray("depth_losses");
        for (int k = 0; k < depthLosses.size(); k++) {
            double want = depthLosses.get(k).getAsDouble();
            assertEquals(want, r.depths[k], 1e-5 * want, "depth " + (k + 1) + " loss");
        }
        JsonObject gradients = ref.getAsJsonObject("gradients");
        for (String key : gradients.keySet()) {
            JsonArray want = gradients.getAsJsonArray(key);
            float[] got = r.gradients.get(key);
            assertEquals(want.size(), got.length, key);
            double diff = 0;
            double scale = 0;
            for (int i = 0; i < got.length; i++) {
                diff = Math.max(diff, Math.abs(got[i] - want.get(i).getAsDouble()));
                scale = Math.max(scale, Math.abs(want.get(i).getAsDouble()));
            }
            System.out.printf("multi-token prediction reference: %s gradient relative error %.3g%n", key, diff / scale);
            assertTrue(diff / scale <= 1e-5, key + ": " + diff / scale);
        }
        System.out.printf("multi-token prediction reference: main loss %.8f (torch %.8f), depths %s%n", r.loss, main,
                java.util.Arrays.toString(r.depths));
    }

    private record Result(double loss, double[] depths, Map<String, float[]> gradients) {}

    private static long[][] longRows(JsonArray rows) {
        long[][] out = new long[rows.size()][];
        for (int i = 0; i < out.length; i++) {
            JsonArray row = rows.get(i).getAsJsonArray();
            out[i] = new long[row.size()];
            for (int j = 0; j < out[i].length; j++) {
                out[i][j] = row.get(j).getAsLong();
            }
        }
        return out;
    }

    private static long[] flatten(long[][] rows) {
        return java.util.Arrays.stream(rows).flatMapToLong(java.util.Arrays::stream).toArray();
    }

    private static float[] flatten(float[][] rows) {
        float[] out = new float[rows.length * rows[0].length];
        for (int i = 0; i < rows.length; i++) {
            System.arraycopy(rows[i], 0, out, i * rows[0].length, rows[i].length);
        }
        return out;
    }
}
