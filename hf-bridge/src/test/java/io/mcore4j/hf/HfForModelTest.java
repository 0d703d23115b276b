package io.mcore4j.hf;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.models.MoeLayerPattern;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.gpt.GptModel;
import io.mcore4j.models.transformer.LayerSpec;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.moe.MoeConfig;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;
import io.mcore4j.tensorparallel.MlpActivation;

import java.nio.file.Path;
import java.util.List;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.junit.jupiter.api.Test;

/**
 * A model mcore4j initialised itself, exported at TP2 through {@link HfConfig#forModel} as float32
 * and imported again at TP1, gives the logits it gave before export: LLaMA-shaped (RMSNorm, SwiGLU,
 * RoPE, GQA, untied), Qwen3-shaped (LLaMA's with query and key norms and 12 channels per head, tied), Qwen3-MoE-shaped
 * (Qwen3's with 4 experts, top-2 of the softmax over all of them, in layer 0 and a dense MLP in layer 1), GPT-2-shaped
 * (LayerNorm, tanh GELU, learned positions, biases, tied) and Gemma-3-shaped (zero-centred pre and post norms, QK-norm,
 * GeGLU, scaled embeddings, a 4-token window on layer 0 with its own rope base, layer 1 global, softmax scale 20^-1/2)
 * and DeepSeek-V3-shaped (multi-latent attention with YaRN, a dense layer, then 4 experts routed by grouped sigmoid
 * scores with an expert bias and scaling, and a shared expert).
 */
class HfForModelTest {
    private static final int VOCAB = 64;

    private static TransformerConfig config(String kind) {
        TransformerConfig.Builder b = TransformerConfig.builder(2, 32, 4, VOCAB).maxSequenceLength(16).dropout(0, 0);
        if (kind.equals("llama") || kind.startsWith("qwen3")) {
            b.queryGroups(2).ffnHiddenSize(48).normalization(TransformerConfig.Normalization.RMS_NORM, 1e-5)
                    .positionEmbedding(TransformerConfig.PositionEmbedding.ROPE).rotary(50000, 1)
                    .activation(MlpActivation.SWIGLU).addBiasLinear(false).tiedEmbeddings(false);
            if (kind.startsWith("qwen3")) {
                b.qkLayernorm(true).kvChannels(12).tiedEmbeddings(true);
            }
            if (kind.equals("qwen3_moe")) {
                // layer 0 experts routed by the top-k of the softmax over all (norm_topk_prob false), layer 1 dense
                b.moe(new TransformerConfig.MoeSettings(MoeLayerPattern.of(List.of(1, 0)), MoeConfig.builder(4, 2, 16)
                        .preSoftmax(true).build()));
            }
        } else if (kind.equals("deepseek_v3")) {
            // MLA with YaRN; layer 0 dense, layer 1 of 4 experts top-2 of 2 groups (1 kept), sigmoid scores with an
            // expert bias, scaling 2.5 and a shared expert of the experts' width
            b.ffnHiddenSize(48).normalization(TransformerConfig.Normalization.RMS_NORM, 1e-6)
                    .positionEmbedding(TransformerConfig.PositionEmbedding.ROPE).activation(MlpActivation.SWIGLU)
                    .addBiasLinear(false).tiedEmbeddings(false)
                    .multiLatentAttention(new TransformerConfig.MlaDims(16, 8, 8, 4, 6))
                    .ropeScaling(TransformerConfig.RopeScaling.yarn(4, 4, 32, 1, 1, 0.8))
                    .moe(new TransformerConfig.MoeSettings(MoeLayerPattern.of(List.of(0, 1)), MoeConfig.builder(4, 2, 16)
                            .routerScore(MoeConfig.RouterScore.SIGMOID).auxLossFree(true).groupLimitedRouting(2, 1)
                            .topKScalingFactor(2.5).sharedExpertFfnHiddenSize(16).build()));
        } else if (kind.equals("gemma3")) {
            b.queryGroups(2).kvChannels(12).ffnHiddenSize(48).normalization(TransformerConfig.Normalization.RMS_NORM, 1e-6)
                    .layernormZeroCenteredGamma(true).qkLayernorm(true).postLayernorms(true, true)
                    .scaleEmbeddingsBySqrtHidden(true).activation(MlpActivation.GEGLU_TANH).addBiasLinear(false)
                    .positionEmbedding(TransformerConfig.PositionEmbedding.ROPE).rotary(1_000_000, 1)
                    .slidingWindow(new TransformerConfig.SlidingWindow(3, 2, List.of())).localRotaryBase(10_000)
                    .softmaxScale(1 / Math.sqrt(20));
        } else {
            b.activation(MlpActivation.GELU_TANH);
        }
        return b.initStd(0.2).build();
    }

    @ParameterizedTest
    @ValueSource(strings = {"llama", "qwen3", "qwen3_moe", "gpt2", "gemma3", "deepseek_v3"})
    void nativeModelExportsAndImportsBack(String kind) throws java.io.IOException {
        TransformerConfig c = config(kind);
        HfConfig hf = HfConfig.forModel(c, VOCAB);
        assertEquals(HfArchitecture.valueOf(kind.toUpperCase(java.util.Locale.ROOT)), hf.architecture());
        // kept under target/ with the logits before export, for scripts/hf/check_export.py
        Path out = Path.of("target", "hf-export", "native_" + kind + "-f32");
        int[] prompt = {1, 5, 9, 63, 0, 17, 33, 2};
        ParallelDims tp2 = ParallelDims.of(2, 2, 1);
        List<float[][]> before = InJvmWorld.run(2, rank -> {
            ProcessGroups groups = rank.groups(tp2);
            GptModel model = GptModel.build(ModelContext.create(c, groups, rank.manager(), new SeedScheme(11)),
                    LayerSpec.tensorParallel(), new int[] {0, 1}, true, true);
            float[][] logits = Fixtures.forward(model, c, groups, rank.manager(), prompt, VOCAB);
            HfExport.write(out, hf, List.of(model), groups.world(), HfDtype.F32);
            return logits;
        });
        writeLogits(out.resolve("logits.json"), prompt, before.get(0));
        float[][] after = Fixtures.logits(out, ParallelDims.of(1, 1, 1), prompt, null);
        double error = Fixtures.relativeError(after, before.get(0));
        System.out.printf("%s-shaped model exported at TP2, imported at TP1: logits relative error %.3g%n", kind, error);
        assertTrue(error <= 1e-5, kind + ": " + error);
    }

    private static void writeLogits(Path file, int[] prompt, float[][] logits) throws java.io.IOException {
        com.google.gson.JsonObject o = new com.google.gson.JsonObject();
        o.add("input_ids", new com.google.gson.Gson().toJsonTree(prompt));
        o.add("logits", new com.google.gson.Gson().toJsonTree(logits));
        java.nio.file.Files.writeString(file, o.toString());
    }

    @Test
    void shapesWithoutAHuggingFaceArchitectureAreRefused() {
        TransformerConfig swigluLayerNorm = TransformerConfig.builder(2, 32, 4, VOCAB)
                .activation(MlpActivation.SWIGLU).build();
        String message = assertThrows(HfCheckpointException.class, () -> HfConfig.forModel(swigluLayerNorm, VOCAB)).getMessage();
        assertTrue(message.contains("GPT2LMHeadModel") && message.contains("SWIGLU"), message);
        TransformerConfig sigmoidExperts = TransformerConfig.builder(2, 32, 4, VOCAB).activation(MlpActivation.SWIGLU)
                .normalization(TransformerConfig.Normalization.RMS_NORM, 1e-5).addBiasLinear(false)
                .positionEmbedding(TransformerConfig.PositionEmbedding.ROPE)
                .moe(new TransformerConfig.MoeSettings(MoeLayerPattern.every(1), MoeConfig.builder(4, 2, 16)
                        .routerScore(MoeConfig.RouterScore.SIGMOID).sharedExpertFfnHiddenSize(8).build())).build();
        assertEquals("a mixture of experts maps to MixtralForCausalLM, which routes by the softmax of the top-k logits to"
                + " routed experts only; got SIGMOID scores, a shared expert",
                assertThrows(HfCheckpointException.class, () -> HfConfig.forModel(sigmoidExperts, VOCAB)).getMessage());
        // Mistral's window covers every layer; a LLaMA shape windowed on some layers only has no class
        TransformerConfig someLayers = config("llama").toBuilder()
                .slidingWindow(new TransformerConfig.SlidingWindow(4, 2, List.of())).build();
        message = assertThrows(HfCheckpointException.class, () -> HfConfig.forModel(someLayers, VOCAB)).getMessage();
        assertTrue(message.contains("on some layers only") && message.contains("MistralForCausalLM"), message);
    }

    /** A window on every layer of a LLaMA shape is Mistral's sliding_window (one more: the query's own position). */
    @Test
    void windowOnEveryLayerIsMistral() {
        HfConfig hf = HfConfig.forModel(config("llama").toBuilder()
                .slidingWindow(TransformerConfig.SlidingWindow.everyLayer(5)).build(), VOCAB);
        assertEquals(HfArchitecture.MISTRAL, hf.architecture());
        assertEquals(6, hf.json().get("sliding_window").getAsInt());
        assertEquals(5, hf.transformerConfig().windowSize(1));
    }
}
