package io.mcore4j.hf;

import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import com.google.gson.JsonArray;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.transformer.LayerSpec;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.models.transformer.MultiLatentAttention;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;
import io.mcore4j.tensorparallel.MlpActivation;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * {@link MultiLatentAttention} with the weights of transformers' {@code DeepseekV3Attention} (fixture of
 * {@code scripts/hf/make_mla_fixture.py}: 4 heads, q_lora_rank 24, kv_lora_rank 16, 16 + 8 query/key channels per
 * head of which 8 rotate as interleaved pairs, 12 value channels) gives transformers' output for the same input
 * (batch 2, 8 tokens, causal) within 1e-5 of its scale, at TP1 and at TP2 (two heads per rank).
 */
class MultiLatentAttentionTest {
    private static final Path DIR = Fixtures.dir("llama").getParent().resolve("deepseek_v3_attention");
    /** mcore4j's keys (Megatron-Core's MLA names) and transformers' names. */
    private static final Map<String, String> NAMES = Map.of("linear_q_down_proj.weight", "q_a_proj.weight",
            "q_layernorm.weight", "q_a_layernorm.weight", "linear_q_up_proj.weight", "q_b_proj.weight",
            "linear_kv_down_proj.weight", "kv_a_proj_with_mqa.weight", "kv_layernorm.weight", "kv_a_layernorm.weight",
            "linear_kv_up_proj.weight", "kv_b_proj.weight", "linear_proj.weight", "o_proj.weight");

    @ParameterizedTest(name = "TP{0}")
    @ValueSource(ints = {1, 2})
    void outputMatchesTransformers(int tp) throws IOException {
        JsonObject fixture = JsonParser.parseString(Files.readString(DIR.resolve("attention.json"), StandardCharsets.UTF_8))
                .getAsJsonObject();
        JsonObject d = fixture.getAsJsonObject("dims");
        TransformerConfig.MlaDims dims = new TransformerConfig.MlaDims(d.get("q_lora_rank").getAsInt(),
                d.get("kv_lora_rank").getAsInt(), d.get("qk_nope_head_dim").getAsInt(), d.get("qk_rope_head_dim").getAsInt(),
                d.get("v_head_dim").getAsInt());
        float[][][] input = batchFirst(fixture.getAsJsonArray("input"));
        float[][][] expected = batchFirst(fixture.getAsJsonArray("output"));
        int b = input.length;
        int s = input[0].length;
        int h = input[0][0].length;
        TransformerConfig c = TransformerConfig.builder(1, h, d.get("num_attention_heads").getAsInt(), 100)
                .normalization(TransformerConfig.Normalization.RMS_NORM, d.get("rms_norm_eps").getAsDouble())
                .positionEmbedding(TransformerConfig.PositionEmbedding.ROPE).rotary(fixture.get("rope_theta").getAsDouble(), 1)
                .activation(MlpActivation.SWIGLU).addBiasLinear(false).maxSequenceLength(64).dropout(0, 0)
                .multiLatentAttention(dims).build();
        ParallelDims layout = ParallelDims.of(tp, tp, 1);
        List<float[]> perRank = InJvmWorld.run(tp, rank -> {
            ProcessGroups groups = rank.groups(layout);
            MultiLatentAttention mla = new MultiLatentAttention(ModelContext.create(c, groups, rank.manager(),
                    new SeedScheme(5)), LayerSpec.tensorParallel(), "", 0);
            try (SafetensorsFile weights = SafetensorsFile.open(DIR.resolve("attention.safetensors"));
                 AutogradScope scope = AutogradScope.openNoGrad(rank.manager())) {
                for (ShardedTensor piece : mla.shardedState("")) {
                    long[] shape = piece.data().getShape().getShape();
                    long[] at = piece.globalOffset();
                    long columns = shape.length == 1 ? 1 : shape[1];
                    float[] values = weights.read(NAMES.get(piece.key()), at[0], shape[0], shape.length == 1 ? 0 : at[1], columns);
                    Tensors.copyInto(piece.data(), scope.manager().create(values, new Shape(shape)));
                }
                float[] flat = new float[s * b * h];
                for (int t = 0; t < s; t++) {
                    for (int j = 0; j < b; j++) {
                        System.arraycopy(input[j][t], 0, flat, (t * b + j) * h, h);
                    }
                }
                NDArray x = scope.manager().create(flat, new Shape(s, b, h)).toType(DataType.FLOAT32, false);
                return mla.forward(scope, x).toFloatArray();
            }
        });
        double diff = 0;
        double scale = 0;
        for (int t = 0; t < s; t++) {
            for (int j = 0; j < b; j++) {
                for (int k = 0; k < h; k++) {
                    diff = Math.max(diff, Math.abs(perRank.get(0)[(t * b + j) * h + k] - expected[j][t][k]));
                    scale = Math.max(scale, Math.abs(expected[j][t][k]));
                }
            }
        }
        System.out.printf("multi-latent attention at TP%d: output relative error %.3g%n", tp, diff / scale);
        assertTrue(diff / scale <= 1e-5, "TP" + tp + ": " + diff / scale);
    }

    /** A JSON [batch][seq][hidden] array. */
    private static float[][][] batchFirst(JsonArray rows) {
        float[][][] out = new float[rows.size()][][];
        for (int i = 0; i < out.length; i++) {
            out[i] = Fixtures.floatRows(rows.get(i).getAsJsonArray());
        }
        return out;
    }
}
