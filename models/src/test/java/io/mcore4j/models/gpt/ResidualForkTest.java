package io.mcore4j.models.gpt;

import static org.junit.jupiter.api.Assertions.assertEquals;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.pytorch.jni.JniUtils;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.models.MoeLayerPattern;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.transformer.LayerSpec;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.moe.MoeConfig;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.TreeMap;
import java.util.stream.IntStream;

import org.junit.jupiter.api.Test;

/**
 * A layer whose second half records Functions (a mixture of experts) runs its attention's backward once per pass, as a
 * dense layer does: libtorch's profiler counts the autograd nodes of one backward at TP1, and the attention's (the
 * composed attention's two batched products per layer, which nothing else in these layers runs) occur once per
 * layer. Without the cut at the second half's input, the traversal from the layer's output went on through the
 * attention with the residual's part of the gradient, and the experts' part traversed it again (twice per layer).
 */
class ResidualForkTest {
    private static final int LAYERS = 2;
    private static final int SEQ = 16;
    private static final int BATCH = 2;

    @Test
    void aMixtureOfExpertsLayerRunsItsAttentionsBackwardOnce() {
        TransformerConfig.Builder dense = TransformerConfig.builder(LAYERS, 32, 4, 64).maxSequenceLength(SEQ);
        TransformerConfig moe = TransformerConfig.builder(LAYERS, 32, 4, 64).maxSequenceLength(SEQ)
                .moe(TransformerConfig.MoeSettings.of(4, 2, MoeLayerPattern.every(1), 48, 0.01,
                        MoeConfig.Dispatcher.ALL_TO_ALL)).build();
        Map<String, Integer> denseNodes = backwardNodes(dense.build());
        Map<String, Integer> moeNodes = backwardNodes(moe);
        int attention = attentionNodes(denseNodes);
        assertEquals(2 * LAYERS, attention, "a dense model's attention backward nodes per pass: " + denseNodes);
        assertEquals(attention, attentionNodes(moeNodes), "the mixture of experts' attention backward nodes per pass: "
                + moeNodes);
    }

    private static int attentionNodes(Map<String, Integer> nodes) {
        return nodes.entrySet().stream().filter(e -> e.getKey().startsWith("BmmBackward"))
                .mapToInt(Map.Entry::getValue).sum();
    }

    /** The backward's autograd nodes by name, counted by libtorch's profiler over the backward of one forward. */
    private static Map<String, Integer> backwardNodes(TransformerConfig config) {
        return InJvmWorld.run(1, rank -> {
            NDManager m = rank.manager();
            GptModel model = GptModel.build(ModelContext.create(config, rank.groups(ParallelDims.of(1, 1, 1)), m,
                    new SeedScheme(42)), LayerSpec.tensorParallel(), IntStream.range(0, LAYERS).toArray(), true, true);
            Path file;
            try {
                file = Files.createTempFile("residual-fork", ".json");
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
            try (AutogradScope scope = AutogradScope.open(m)) {
                NDArray[] data = TokenBatches.shifted(scope.manager(), config.vocabSize(), SEQ, BATCH, 7, 3);
                NDArray loss = model.forward(scope, data[0], null, data[1]);
                JniUtils.startProfile(false, false, false);
                try {
                    scope.backward(loss);
                } finally {
                    JniUtils.stopProfile(file.toString());
                }
            }
            try {
                Map<String, Integer> counts = new TreeMap<>();
                JsonElement root = JsonParser.parseString(Files.readString(file));
                Iterable<JsonElement> events = root.isJsonArray() ? root.getAsJsonArray()
                        : root.getAsJsonObject().getAsJsonArray("traceEvents");
                for (JsonElement e : events) {
                    JsonObject event = e.getAsJsonObject();
                    String name = event.has("name") ? event.get("name").getAsString() : "";
                    if (name.startsWith("autograd::engine::evaluate_function: ")) {
                        counts.merge(name.substring("autograd::engine::evaluate_function: ".length()), 1, Integer::sum);
                    }
                }
                return counts;
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            } finally {
                file.toFile().delete();
            }
        }).get(0);
    }
}
