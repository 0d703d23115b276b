package io.mcore4j.hf;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import com.google.gson.JsonArray;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.gpt.GptModel;
import io.mcore4j.models.transformer.LayerSpec;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.io.IOException;
import java.net.URISyntaxException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.function.BiConsumer;

import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The tiny checkpoints of {@code scripts/hf/make_fixtures.py} and the harness the tests share: build
 * a GPT at a layout from a checkpoint's config, load it, run the fixed prompt through every pipeline
 * stage and gather the logits.
 */
final class Fixtures {
    /** Vocabulary divisor of the tests: 100 tokens pad to 104 at TP1 and 112 at TP2. */
    static final int VOCAB_DIVISOR = 8;

    private Fixtures() {}

    static Path dir(String name) {
        try {
            return Path.of(Objects.requireNonNull(Fixtures.class.getResource("/hf/" + name + "/config.json"),
                    "fixture " + name).toURI()).getParent();
        } catch (URISyntaxException e) {
            throw new IllegalStateException(e);
        }
    }

    /** The fixture's prompt. */
    static int[] prompt(String name) {
        JsonArray ids = reference(name).getAsJsonArray("input_ids");
        int[] out = new int[ids.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = ids.get(i).getAsInt();
        }
        return out;
    }

    /** The logits transformers computed, [seq][vocab]. */
    static float[][] referenceLogits(String name) {
        return floatRows(reference(name).getAsJsonArray("logits"));
    }

    /**
     * @param rows a JSON array of arrays of numbers
     * @return them as float rows
     */
    static float[][] floatRows(JsonArray rows) {
        float[][] out = new float[rows.size()][];
        for (int i = 0; i < out.length; i++) {
            JsonArray row = rows.get(i).getAsJsonArray();
            out[i] = new float[row.size()];
            for (int j = 0; j < out[i].length; j++) {
                out[i][j] = row.get(j).getAsFloat();
            }
        }
        return out;
    }

    /** The tokens transformers' greedy generate() appended to the prompt. */
    static int[] referenceGenerated(String name) {
        JsonArray ids = reference(name).getAsJsonArray("generated");
        int[] out = new int[ids.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = ids.get(i).getAsInt();
        }
        return out;
    }

    private static JsonObject reference(String name) {
        try {
            return JsonParser.parseString(Files.readString(dir(name).resolve("logits.json"), StandardCharsets.UTF_8))
                    .getAsJsonObject();
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
    }

    /**
     * Builds the model of {@code checkpoint} at {@code dims} (one chunk per rank), lets {@code load}
     * fill it, optionally runs {@code after} on every rank, and returns the logits of the prompt
     * for the checkpoint's vocabulary (padded columns dropped).
     */
    static float[][] logits(Path checkpoint, ParallelDims dims, int[] prompt,
                            BiConsumer<GptModel, ProcessGroups> after) {
        return logits(checkpoint, dims, prompt, after, DataType.FLOAT32);
    }

    /** The same with the model's parameters in {@code dtype}. */
    static float[][] logits(Path checkpoint, ParallelDims dims, int[] prompt,
                            BiConsumer<GptModel, ProcessGroups> after, DataType dtype) {
        List<float[][]> perRank = InJvmWorld.run(dims.worldSize(), rank -> {
            ProcessGroups groups = rank.groups(dims);
            NDManager m = rank.manager();
            try (HfCheckpoint ck = HfCheckpoint.open(checkpoint)) {
                TransformerConfig c = ck.config().transformerConfig(VOCAB_DIVISOR, dims.tensorParallel(), dtype);
                GptModel model = build(c, groups, m);
                ck.loadInto(List.of(model));
                float[][] out = forward(model, c, groups, m, prompt, ck.config().vocabSize());
                if (after != null) {
                    after.accept(model, groups);
                }
                return out;
            }
        });
        for (float[][] r : perRank) {
            if (r != null) {
                return r;
            }
        }
        throw new AssertionError("no rank returned logits");
    }

    static GptModel build(TransformerConfig c, ProcessGroups groups, NDManager m) {
        int pp = groups.dims().pipelineParallel();
        int per = c.numLayers() / pp;
        int[] layers = new int[per];
        for (int i = 0; i < per; i++) {
            layers[i] = groups.pipelineRank() * per + i;
        }
        return GptModel.build(ModelContext.create(c, groups, m, new SeedScheme(7)), LayerSpec.tensorParallel(), layers,
                groups.isFirstStage(), groups.isLastStage());
    }

    /** Runs the prompt through the stages (activations passed over the pipeline group); logits on the last stage. */
    static float[][] forward(GptModel model, TransformerConfig c, ProcessGroups groups, NDManager m, int[] prompt, int vocab) {
        int s = prompt.length;
        try (AutogradScope scope = AutogradScope.openNoGrad(m)) {
            NDManager sm = scope.manager();
            NDArray tokens = sm.create(prompt, new Shape(s, 1)).toType(DataType.INT64, false);
            NDArray input = null;
            int stage = groups.pipelineRank();
            if (!groups.isFirstStage()) {
                input = groups.pp().recv(new Shape(s, 1, c.hiddenSize()), c.dtype(), stage - 1, sm);
            }
            NDArray out = model.forward(scope, tokens, input, null);
            if (!groups.isLastStage()) {
                groups.pp().send(out, stage + 1);
                return null;
            }
            NDArray full = groups.tp().allGather(out, 2, sm).toType(DataType.FLOAT32, false);
            long padded = full.getShape().get(2);
            float[] flat = full.toFloatArray();
            float[][] logits = new float[s][vocab];
            for (int i = 0; i < s; i++) {
                System.arraycopy(flat, (int) (i * padded), logits[i], 0, vocab);
                for (long j = vocab; j < padded; j++) {
                    assertTrue(flat[(int) (i * padded + j)] == 0, "padded logit " + j + " is not 0");
                }
            }
            return logits;
        }
    }

    /** Largest |a - b| over the largest |b|: the error relative to the logits' scale. */
    static double relativeError(float[][] actual, float[][] expected) {
        double diff = 0;
        double scale = 0;
        for (int i = 0; i < expected.length; i++) {
            for (int j = 0; j < expected[i].length; j++) {
                diff = Math.max(diff, Math.abs(actual[i][j] - expected[i][j]));
                scale = Math.max(scale, Math.abs(expected[i][j]));
            }
        }
        return diff / scale;
    }

    static List<String> all() {
        return new ArrayList<>(List.of("llama", "qwen2", "qwen2_window", "qwen3", "mistral", "mixtral", "gpt2", "gemma3",
                "qwen3_moe", "deepseek_v3"));
    }

    /** The fixtures with mixture-of-experts layers. */
    static List<String> withExperts() {
        return List.of("mixtral", "qwen3_moe", "deepseek_v3");
    }
}
