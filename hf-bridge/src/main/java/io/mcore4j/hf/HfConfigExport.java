package io.mcore4j.hf;

import com.google.gson.JsonArray;
import com.google.gson.JsonObject;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.moe.MoeConfig;
import io.mcore4j.tensorparallel.MlpActivation;

import java.util.Set;

/**
 * The Hugging Face {@code config.json} of a model mcore4j built itself (for {@link HfExport}): GPT-2 for LayerNorm
 * + GELU + learned positions with biases and a tied head; Gemma 3 for its norms, GeGLU and scaled embeddings
 * ({@link Gemma3TextConfig}); DeepSeek-V3 for multi-latent attention ({@link DeepseekV3Config}); otherwise the LLaMA family for RMSNorm + SwiGLU + RoPE: Qwen2 with QKV biases only,
 * Qwen3 with query and key norms (Qwen3-MoE with experts too), Mixtral with experts in every layer and no query and
 * key norms, Mistral with a sliding window on every layer, LLaMA otherwise. The written config is read back and must give the model's shape.
 */
final class HfConfigExport {
    private HfConfigExport() {}

    /**
     * @param c the model's config
     * @param vocabSize the tokenizer's vocabulary (at most the model's padded one)
     * @return the config
     * @throws HfCheckpointException if no supported architecture has the model's shape
     */
    static HfConfig forModel(TransformerConfig c, int vocabSize) {
        JsonObject j = new JsonObject();
        HfArchitecture arch;
        if (c.normalization() == TransformerConfig.Normalization.LAYER_NORM) {
            arch = HfArchitecture.GPT2;
            gpt2(c, j);
        } else if (c.multiLatentAttention() != null) {
            arch = HfArchitecture.DEEPSEEK_V3;
            DeepseekV3Config.write(c, j);
        } else if (Gemma3TextConfig.isGemma(c)) {
            arch = HfArchitecture.GEMMA3;
            Gemma3TextConfig.write(c, j);
        } else {
            arch = c.moe() != null ? c.qkLayernorm() ? HfArchitecture.QWEN3_MOE : HfArchitecture.MIXTRAL
                    : c.qkLayernorm() ? HfArchitecture.QWEN3
                    : c.addQkvBias() && !c.addBiasLinear() ? HfArchitecture.QWEN2
                    : c.slidingWindow() != null ? HfArchitecture.MISTRAL : HfArchitecture.LLAMA;
            llama(arch, c, j);
        }
        j.add("architectures", new JsonArray());
        j.getAsJsonArray("architectures").add(arch.className());
        j.addProperty("model_type", arch.modelType());
        j.addProperty("vocab_size", vocabSize);
        j.addProperty("initializer_range", c.initStd());
        HfConfig parsed = HfConfig.parse("the config of " + arch.className() + " made from the model", j, Set.of());
        TransformerConfig back = parsed.transformerConfig().withVocabSize(c.vocabSize());
        if (!sameNetwork(back, c)) {
            throw new HfCheckpointException("the model does not round-trip through " + arch.className() + "'s config: " + c
                    + " came back as " + back);
        }
        return parsed;
    }

    private static void gpt2(TransformerConfig c, JsonObject j) {
        j.addProperty("n_embd", c.hiddenSize());
        j.addProperty("n_layer", c.numLayers());
        j.addProperty("n_head", c.numAttentionHeads());
        j.addProperty("n_inner", c.ffnHiddenSize());
        j.addProperty("n_positions", c.maxSequenceLength());
        j.addProperty("activation_function", c.activation() == MlpActivation.GELU ? "gelu" : "gelu_new");
        j.addProperty("layer_norm_epsilon", c.normEpsilon());
        j.addProperty("resid_pdrop", c.hiddenDropout());
        j.addProperty("embd_pdrop", c.hiddenDropout());
        j.addProperty("attn_pdrop", c.attentionDropout());
        j.addProperty("tie_word_embeddings", c.tiedEmbeddings());
        if (c.activation().isGated() || !c.addBiasLinear() || c.usesRope()) {
            throw new HfCheckpointException("a LayerNorm model maps to GPT2LMHeadModel, which needs GELU, biases and "
                    + "learned positions; got " + c.activation() + ", bias " + c.addBiasLinear() + ", " + c.positionEmbedding());
        }
    }

    private static void llama(HfArchitecture arch, TransformerConfig c, JsonObject j) {
        j.addProperty("hidden_size", c.hiddenSize());
        j.addProperty("num_hidden_layers", c.numLayers());
        j.addProperty("num_attention_heads", c.numAttentionHeads());
        j.addProperty("num_key_value_heads", c.numQueryGroups());
        j.addProperty("head_dim", c.kvChannels());
        j.addProperty("intermediate_size", arch == HfArchitecture.MIXTRAL ? c.moe().ffnHiddenSize() : c.ffnHiddenSize());
        j.addProperty("hidden_act", "silu");
        j.addProperty("max_position_embeddings", c.maxSequenceLength());
        j.addProperty("rms_norm_eps", c.normEpsilon());
        j.addProperty("attention_dropout", c.attentionDropout());
        j.addProperty("tie_word_embeddings", c.tiedEmbeddings());
        if (arch == HfArchitecture.LLAMA) {
            j.addProperty("attention_bias", c.addBiasLinear());
            j.addProperty("mlp_bias", c.addBiasLinear());
        }
        slidingWindow(arch, c, j);
        if (arch == HfArchitecture.QWEN3 || arch == HfArchitecture.QWEN3_MOE) {
            j.addProperty("attention_bias", false);
            if (c.addBiasLinear() || c.addQkvBias()) {
                throw new HfCheckpointException("a model with query and key norms maps to Qwen3ForCausalLM, which has no"
                        + " biases here; got add_bias_linear " + c.addBiasLinear() + ", add_qkv_bias " + c.addQkvBias());
            }
        }
        j.add("rope_parameters", rope(c.rotaryBase(), c.ropeScaling()));
        if (c.moe() != null) {
            refuseRoutingTransformersLacks(arch, c.moe().config());
            j.addProperty(arch == HfArchitecture.MIXTRAL ? "num_local_experts" : "num_experts", c.moe().numExperts());
            j.addProperty("num_experts_per_tok", c.moe().topK());
            j.addProperty("output_router_logits", c.moe().auxLossCoeff() > 0);
            j.addProperty("router_aux_loss_coef", c.moe().auxLossCoeff());
        }
        if (arch == HfArchitecture.QWEN3_MOE) {
            // every layer a candidate (step 1); the dense ones listed
            j.addProperty("moe_intermediate_size", c.moe().ffnHiddenSize());
            j.addProperty("norm_topk_prob", !c.moe().config().preSoftmax());
            j.addProperty("decoder_sparse_step", 1);
            JsonArray dense = new JsonArray();
            for (int i = 0; i < c.numLayers(); i++) {
                if (!c.isMoeLayer(i)) {
                    dense.add(i);
                }
            }
            j.add("mlp_only_layers", dense);
        }
        if (c.activation() != MlpActivation.SWIGLU || !c.usesRope() || c.rotaryPercent() != 1
                || arch == HfArchitecture.MIXTRAL && c.moe().layers().count(c.numLayers()) != c.numLayers()) {
            throw new HfCheckpointException("an RMSNorm model maps to " + arch.className() + ", which needs SwiGLU and "
                    + "full rotary embeddings (and experts in every layer); got " + c);
        }
    }

    /**
     * Mixtral routes by the softmax over each token's top-k logits to routed experts alone, Qwen3-MoE by that or (without
     * {@code norm_topk_prob}) by the top-k of the softmax over all experts: a model whose layers compute something else
     * would be exported as a different model.
     */
    private static void refuseRoutingTransformersLacks(HfArchitecture arch, MoeConfig m) {
        boolean preSoftmaxRefused = m.preSoftmax() && arch == HfArchitecture.MIXTRAL;
        if (m.routerScore() != MoeConfig.RouterScore.SOFTMAX || preSoftmaxRefused || m.hasGroupLimitedRouting()
                || m.topKScalingFactor() != 1 || m.auxLossFree() || m.sharedExpertFfnHiddenSize() > 0) {
            throw new HfCheckpointException("a mixture of experts maps to " + arch.className() + ", which routes by the softmax"
                    + " of the top-k logits" + (arch == HfArchitecture.MIXTRAL ? "" : " (or the top-k of the softmax)")
                    + " to routed experts only; got " + m.routerScore() + " scores"
                    + (preSoftmaxRefused ? " before the top-k" : "") + (m.hasGroupLimitedRouting() ? ", group-limited routing" : "")
                    + (m.topKScalingFactor() != 1 ? ", top-k scaling " + m.topKScalingFactor() : "")
                    + (m.auxLossFree() ? ", an expert bias" : "")
                    + (m.sharedExpertFfnHiddenSize() > 0 ? ", a shared expert" : ""));
        }
    }

    /**
     * One set of RoPE parameters as transformers 5 writes them ({@code rope_parameters}).
     *
     * @param theta the base
     * @param s LLaMA 3.1, linear or YaRN scaling, or null
     * @return the object
     */
    static JsonObject rope(double theta, TransformerConfig.RopeScaling s) {
        JsonObject rope = new JsonObject();
        rope.addProperty("rope_theta", theta);
        boolean linear = s != null && s.type() == TransformerConfig.RopeScaling.Type.LINEAR;
        boolean yarn = s != null && s.type() == TransformerConfig.RopeScaling.Type.YARN;
        rope.addProperty("rope_type", s == null ? "default" : linear ? "linear" : yarn ? "yarn" : "llama3");
        if (yarn) {
            rope.addProperty("factor", s.factor());
            rope.addProperty("original_max_position_embeddings", s.originalMaxPositions());
            rope.addProperty("beta_fast", s.betaFast());
            rope.addProperty("beta_slow", s.betaSlow());
            rope.addProperty("mscale", s.mscale());
            rope.addProperty("mscale_all_dim", s.mscaleAllDim());
        } else if (linear) {
            rope.addProperty("factor", s.factor());
        } else if (s != null) {
            rope.addProperty("factor", s.factor());
            rope.addProperty("low_freq_factor", s.lowFreqFactor());
            rope.addProperty("high_freq_factor", s.highFreqFactor());
            rope.addProperty("original_max_position_embeddings", s.originalMaxPositions());
        }
        return rope;
    }

    /**
     * @param c a model
     * @return {@code layer_types}: {@code sliding_attention} where a layer has a window, else {@code full_attention}
     */
    static JsonArray layerTypes(TransformerConfig c) {
        JsonArray types = new JsonArray();
        for (int i = 0; i < c.numLayers(); i++) {
            types.add(c.windowSize(i) >= 0 ? ConfigReader.SLIDING : ConfigReader.FULL);
        }
        return types;
    }

    /**
     * Writes the model's sliding window the way {@code arch} reads it: Mistral's on every layer, Qwen2's and
     * Qwen3's per layer with {@code use_sliding_window} and {@code layer_types}.
     *
     * @throws HfCheckpointException where the architecture cannot hold the model's window
     */
    private static void slidingWindow(HfArchitecture arch, TransformerConfig c, JsonObject j) {
        TransformerConfig.SlidingWindow window = c.slidingWindow();
        if (arch == HfArchitecture.QWEN2 || arch == HfArchitecture.QWEN3 || arch == HfArchitecture.QWEN3_MOE) {
            j.addProperty("use_sliding_window", window != null);
        }
        if (window == null) {
            return;
        }
        int first = -1;
        boolean everyLayer = true;
        for (int i = 0; i < c.numLayers(); i++) {
            first = first < 0 && window.appliesTo(i) ? i : first;
            everyLayer &= window.appliesTo(i);
        }
        if (arch == HfArchitecture.MIXTRAL || arch == HfArchitecture.QWEN3_MOE || arch == HfArchitecture.LLAMA
                || arch == HfArchitecture.MISTRAL && !everyLayer) {
            throw new HfCheckpointException("a sliding window " + (everyLayer ? "" : "on some layers only ") + "has no place in "
                    + arch.className() + (arch == HfArchitecture.MISTRAL ? ", whose window covers every layer" : "")
                    + "; got " + window);
        }
        if (arch == HfArchitecture.MISTRAL && c.addBiasLinear()) {
            throw new HfCheckpointException("a windowed model maps to MistralForCausalLM, which has no biases; got add_bias_linear");
        }
        j.addProperty("sliding_window", window.size() + 1);
        if (arch != HfArchitecture.MISTRAL) {
            j.add("layer_types", layerTypes(c));
            j.addProperty("max_window_layers", first);
        }
    }

    /**
     * Whether a config read back computes what the model computes (the options a {@code config.json} carries;
     * dropout, precision and parallelism are the run's).
     */
    private static boolean sameNetwork(TransformerConfig back, TransformerConfig c) {
        boolean mla = c.multiLatentAttention() != null;
        boolean same = back.numLayers() == c.numLayers() && (mla || back.kvChannels() == c.kvChannels())
                && java.util.Objects.equals(back.multiLatentAttention(), c.multiLatentAttention())
                && back.tiedEmbeddings() == c.tiedEmbeddings() && back.qkLayernorm() == c.qkLayernorm()
                && back.addQkvBias() == c.addQkvBias() && back.addBiasLinear() == c.addBiasLinear()
                && back.activation() == c.activation() && back.layernormZeroCenteredGamma() == c.layernormZeroCenteredGamma()
                && back.postSelfAttnLayernorm() == c.postSelfAttnLayernorm() && back.postMlpLayernorm() == c.postMlpLayernorm()
                && back.scaleEmbeddingsBySqrtHidden() == c.scaleEmbeddingsBySqrtHidden()
                && (mla || Math.abs(scoreScale(back) - scoreScale(c)) <= 1e-12 * scoreScale(c)) && sameExperts(back, c);
        for (int i = 0; i < c.numLayers(); i++) {
            same &= effectiveWindow(back, i) == effectiveWindow(c, i)
                    && (!c.usesRope() || back.rotaryBase(i) == c.rotaryBase(i)
                            && java.util.Objects.equals(back.ropeScaling(i), c.ropeScaling(i)));
        }
        return same;
    }

    /** The same experts and routing in the same layers, and the same dense MLPs where there are any. */
    private static boolean sameExperts(TransformerConfig back, TransformerConfig c) {
        if ((back.moe() == null) != (c.moe() == null)) {
            return false;
        }
        boolean dense = c.moe() == null;
        if (c.moe() != null) {
            MoeConfig a = back.moe().config();
            MoeConfig b = c.moe().config();
            if (a.numExperts() != b.numExperts() || a.topK() != b.topK() || a.ffnHiddenSize() != b.ffnHiddenSize()
                    || a.preSoftmax() != b.preSoftmax() || a.routerScore() != b.routerScore()
                    || a.numGroups() != b.numGroups() || a.groupTopK() != b.groupTopK()
                    || a.topKScalingFactor() != b.topKScalingFactor() || a.auxLossFree() != b.auxLossFree()
                    || a.sharedExpertFfnHiddenSize() != b.sharedExpertFfnHiddenSize()) {
                return false;
            }
            for (int i = 0; i < c.numLayers(); i++) {
                if (back.isMoeLayer(i) != c.isMoeLayer(i)) {
                    return false;
                }
                dense |= !c.isMoeLayer(i);
            }
        }
        return !dense || back.ffnHiddenSize() == c.ffnHiddenSize();
    }

    private static double scoreScale(TransformerConfig c) {
        return c.softmaxScale() > 0 ? c.softmaxScale() : 1 / Math.sqrt(c.kvChannels());
    }

    /** A layer's window as far as it cuts anything within the model's positions, else -1. */
    private static int effectiveWindow(TransformerConfig c, int layer) {
        int size = c.windowSize(layer);
        return size >= c.maxSequenceLength() - 1 ? -1 : size;
    }
}
