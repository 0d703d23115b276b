package io.mcore4j.hf;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonNull;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.moe.MoeConfig;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Set;
import java.util.function.Consumer;
import java.util.stream.IntStream;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * DeepSeek-V3's config keys as Megatron-Core's options (multi-latent attention, YaRN, the dense first layers, the
 * sigmoid router with expert bias, group-limited top-k, scaling and a shared expert), the values refused by name, and
 * the multi-token-prediction layers a published checkpoint carries, which are left out as transformers leaves them.
 */
class DeepseekV3ConfigTest {
    @TempDir
    Path tmp;

    private static JsonObject fixture() {
        try {
            return JsonParser.parseString(Files.readString(Fixtures.dir("deepseek_v3").resolve("config.json"),
                    StandardCharsets.UTF_8)).getAsJsonObject();
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
    }

    private static TransformerConfig parse(Consumer<JsonObject> edit) {
        JsonObject json = fixture();
        edit.accept(json);
        return HfConfig.parse("config.json", json, Set.of()).transformerConfig();
    }

    private static String refused(Consumer<JsonObject> edit) {
        return assertThrows(HfCheckpointException.class, () -> parse(edit)).getMessage();
    }

    @Test
    void fixtureMapsToMegatronsDeepSeekOptions() {
        TransformerConfig c = parse(j -> { });
        assertEquals(new TransformerConfig.MlaDims(32, 16, 16, 8, 16), c.multiLatentAttention());
        assertEquals(TransformerConfig.RopeScaling.yarn(4, 64, 32, 1, 1, 0.8), c.ropeScaling());
        assertEquals(List.of(false, true, true, true), IntStream.range(0, 4).mapToObj(c::isMoeLayer).toList());
        MoeConfig m = c.moe().config();
        assertEquals(MoeConfig.RouterScore.SIGMOID, m.routerScore());
        assertTrue(m.auxLossFree(), "e_score_correction_bias is the expert bias");
        assertEquals(List.of(2, 1, 2), List.of(m.numGroups(), m.groupTopK(), m.topK()));
        assertEquals(2.5, m.topKScalingFactor());
        assertEquals(32, m.sharedExpertFfnHiddenSize());
        assertEquals(96, c.ffnHiddenSize());
        assertEquals(0, parse(j -> j.add("q_lora_rank", JsonNull.INSTANCE)).multiLatentAttention().qLoraRank(),
                "no query latent");
        assertEquals(0, parse(j -> j.addProperty("n_group", 1)).moe().config().numGroups(), "one group: no limit");
        assertNull(parse(j -> j.addProperty("first_k_dense_replace", 4)).moe(), "every layer dense");
    }

    @Test
    void valuesMcore4jCannotHonourAreRefusedByName() {
        assertTrue(refused(j -> j.addProperty("norm_topk_prob", false)).contains("\"norm_topk_prob\" = false is not supported"));
        assertTrue(refused(j -> j.addProperty("num_experts_per_tok", 4)).contains("\"topk_group\" = 1 is not supported:"
                + " expected num_experts_per_tok / topk_group = 2"));
        assertTrue(refused(j -> j.addProperty("scoring_func", "softmax")).contains("\"scoring_func\""));
        assertTrue(refused(j -> j.addProperty("topk_method", "greedy")).contains("\"topk_method\""));
        assertTrue(refused(j -> j.addProperty("rope_interleave", false)).contains("\"rope_interleave\""));
        assertTrue(refused(j -> j.add("quantization_config", new JsonObject())).contains("FP8 weights are not supported"));
        assertTrue(refused(j -> j.getAsJsonObject("rope_parameters").remove("mscale")).contains("\"mscale_all_dim\""));
        assertTrue(refused(j -> j.addProperty("num_key_value_heads", 2)).contains("\"num_key_value_heads\""));
        assertTrue(refused(j -> j.addProperty("rms_norm_eps", 1e-5)).contains("latent norms q_a_layernorm and kv_a_layernorm"
                + " always use 1e-6"));
    }

    /**
     * A published checkpoint's layers past num_hidden_layers (its multi-token-prediction module) are not loaded, as in
     * transformers: the fixture read as a 3-layer model leaves its layer 3 out.
     */
    @Test
    void multiTokenPredictionLayersAreLeftOut() throws IOException {
        Path dir = tmp.resolve("with-mtp");
        Files.createDirectories(dir);
        for (String f : List.of("config.json", "model.safetensors")) {
            Files.copy(Fixtures.dir("deepseek_v3").resolve(f), dir.resolve(f));
        }
        String config = Files.readString(dir.resolve("config.json"), StandardCharsets.UTF_8);
        Files.writeString(dir.resolve("config.json"), config.replace("\"num_hidden_layers\": 4", "\"num_hidden_layers\": 3"),
                StandardCharsets.UTF_8);
        try (HfCheckpoint ck = HfCheckpoint.open(dir)) {
            assertEquals(3, ck.config().transformerConfig().numLayers());
            assertTrue(ck.tensorNames().contains("model.layers.3.self_attn.q_a_proj.weight"));
        }
    }
}
