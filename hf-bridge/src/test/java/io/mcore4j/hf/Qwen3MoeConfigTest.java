package io.mcore4j.hf;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonArray;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.moe.MoeConfig;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.List;
import java.util.Set;
import java.util.function.Consumer;

import org.junit.jupiter.api.Test;

/**
 * Qwen3-MoE's config keys as Megatron-Core's options: which layers have experts ({@code decoder_sparse_step} counts
 * layers from 1, {@code mlp_only_layers} overrides it), {@code norm_topk_prob} as the softmax after (true) or before
 * (false, {@code moe_router_pre_softmax}) the top-k, the expert widths, and the values that are refused by name.
 */
class Qwen3MoeConfigTest {
    private static TransformerConfig parse(Consumer<JsonObject> edit) {
        JsonObject json;
        try {
            json = JsonParser.parseString(Files.readString(Fixtures.dir("qwen3_moe").resolve("config.json"),
                    StandardCharsets.UTF_8)).getAsJsonObject();
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
        edit.accept(json);
        return HfConfig.parse("config.json", json, Set.of()).transformerConfig();
    }

    private static String refused(Consumer<JsonObject> edit) {
        return assertThrows(HfCheckpointException.class, () -> parse(edit)).getMessage();
    }

    private static List<Boolean> moeLayers(TransformerConfig c) {
        return java.util.stream.IntStream.range(0, c.numLayers()).mapToObj(c::isMoeLayer).toList();
    }

    @Test
    void fixtureMapsToFineGrainedExpertsBesideOneDenseLayer() {
        TransformerConfig c = parse(j -> { });
        MoeConfig moe = c.moe().config();
        assertEquals(List.of(true, true, false, true), moeLayers(c));
        assertEquals(8, moe.numExperts());
        assertEquals(2, moe.topK());
        assertEquals(32, moe.ffnHiddenSize());
        assertEquals(96, c.ffnHiddenSize());
        assertEquals(32, c.kvChannels());
        assertFalse(moe.preSoftmax(), "norm_topk_prob: the softmax over the top-k logits");
        assertEquals(MoeConfig.RouterScore.SOFTMAX, moe.routerScore());
        assertTrue(c.qkLayernorm());
        assertEquals(0, moe.auxLossCoeff());
    }

    @Test
    void decoderSparseStepCountsLayersFromOneAndMlpOnlyLayersOverrideIt() {
        TransformerConfig c = parse(j -> {
            j.addProperty("decoder_sparse_step", 2);
            j.add("mlp_only_layers", new JsonArray());
        });
        assertEquals(List.of(false, true, false, true), moeLayers(c));
        c = parse(j -> {
            j.addProperty("decoder_sparse_step", 2);
            JsonArray dense = new JsonArray();
            dense.add(3);
            j.add("mlp_only_layers", dense);
        });
        assertEquals(List.of(false, true, false, false), moeLayers(c));
        assertNull(parse(j -> j.addProperty("num_local_experts", 0)).moe(), "no experts: every layer dense");
    }

    @Test
    void withoutNormTopkProbTheSoftmaxComesBeforeTheTopK() {
        TransformerConfig c = parse(j -> {
            j.addProperty("norm_topk_prob", false);
            j.addProperty("output_router_logits", true);
        });
        assertTrue(c.moe().config().preSoftmax());
        assertEquals(0.001, c.moe().config().auxLossCoeff(), 1e-12);
    }

    /** Published Qwen3-MoE configs say num_experts; transformers 5 writes num_local_experts. */
    @Test
    void numExpertsUnderEitherName() {
        TransformerConfig c = parse(j -> {
            j.remove("num_local_experts");
            j.addProperty("num_experts", 8);
            j.addProperty("max_window_layers", 48);
        });
        assertEquals(8, c.moe().numExperts());
        String message = refused(j -> j.addProperty("num_experts", 16));
        assertTrue(message.contains("\"num_local_experts\" = 8") && message.contains("num_experts (16)"), message);
    }

    @Test
    void unsupportedValuesAreNamed() {
        String window = refused(j -> {
            j.addProperty("use_sliding_window", true);
            j.addProperty("sliding_window", 4);
        });
        assertTrue(window.contains("\"use_sliding_window\" = true") && window.contains("not supported"), window);
        String layer = refused(j -> {
            JsonArray dense = new JsonArray();
            dense.add(4);
            j.add("mlp_only_layers", dense);
        });
        assertTrue(layer.contains("\"mlp_only_layers\" = [4]") && layer.contains("[0, 4)"), layer);
        String top1 = refused(j -> j.addProperty("num_experts_per_tok", 1));
        assertTrue(top1.contains("\"num_experts_per_tok\" = 1") && top1.contains("norm_topk_prob"), top1);
        String bias = refused(j -> j.addProperty("attention_bias", true));
        assertTrue(bias.contains("\"attention_bias\" = true"), bias);
        String unknown = refused(j -> j.addProperty("shared_expert_intermediate_size", 64));
        assertTrue(unknown.contains("shared_expert_intermediate_size") && unknown.contains("Qwen3MoeForCausalLM"), unknown);
    }
}
