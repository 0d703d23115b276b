package io.mcore4j.hf;

import com.google.gson.JsonObject;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.tensorparallel.MlpActivation;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;

/**
 * Gemma 3's text model ({@code Gemma3ForCausalLM}, {@code model_type} {@code gemma3_text}) in mcore4j's terms, read
 * from and written to its {@code config.json} with transformers' defaults for absent keys:
 * <ul>
 * <li>RMSNorm whose weights are centred on zero and scale by {@code 1 + weight} in float32
 *     ({@code layernorm_zero_centered_gamma}), before and after the attention and the MLP
 *     ({@code post_self_attn_layernorm}, {@code post_mlp_layernorm}) and on each query and key head
 *     ({@code qk_layernorm});
 * <li>word embeddings multiplied by {@code sqrt(hidden_size)}, rounded to the parameter dtype;
 * <li>GeGLU with the tanh GELU ({@code hidden_activation: gelu_pytorch_tanh});
 * <li>attention scores scaled by {@code query_pre_attn_scalar^-1/2} ({@code softmax_scale});
 * <li>a sliding window of {@code sliding_window} tokens on the layers {@code layer_types} (or
 *     {@code sliding_window_pattern}) calls {@code sliding_attention}, which rotate with their own RoPE base
 *     ({@code rope_parameters.sliding_attention} or {@code rope_local_base_freq}); the other layers with
 *     {@code full_attention}'s (or {@code rope_theta} and {@code rope_scaling}): default, {@code linear} (Gemma 3's
 *     4B and larger checkpoints) or {@code llama3}.
 * </ul>
 * Refused by name: attention biases, logit soft-capping of the scores or of the output
 * ({@code attn_logit_softcapping}, {@code final_logit_softcapping}), bidirectional attention, other rope types
 * ({@code yarn}, {@code dynamic}, ...), a scaled rope on the sliding layers.
 */
final class Gemma3TextConfig {
    /** The keys of {@code Gemma3TextConfig} that shape the network or are checked. */
    static final Set<String> KEYS = Set.of("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads", "head_dim", "hidden_activation", "max_position_embeddings",
            "initializer_range", "rms_norm_eps", "tie_word_embeddings", "rope_parameters", "rope_theta",
            "rope_local_base_freq", "rope_scaling", "attention_bias", "attention_dropout", "query_pre_attn_scalar",
            "sliding_window", "layer_types", "sliding_window_pattern", "_sliding_window_pattern",
            "final_logit_softcapping", "attn_logit_softcapping", "use_bidirectional_attention");

    /** Gemma3TextConfig's defaults. */
    private static final int DEFAULT_GROUPS = 4;
    private static final int DEFAULT_HEAD_DIM = 256;
    private static final int DEFAULT_MAX_POSITIONS = 131_072;
    private static final double DEFAULT_EPS = 1e-6;
    private static final double DEFAULT_QUERY_PRE_ATTN_SCALAR = 256;
    private static final int DEFAULT_WINDOW = 4096;
    private static final int DEFAULT_PATTERN = 6;
    private static final double DEFAULT_GLOBAL_THETA = 1_000_000;
    private static final double DEFAULT_LOCAL_THETA = 10_000;
    private static final String ACTIVATION = "gelu_pytorch_tanh";

    private Gemma3TextConfig() {}

    /**
     * @param r the config
     * @return the model
     * @throws HfCheckpointException naming a key whose value mcore4j cannot honour
     */
    static TransformerConfig read(ConfigReader r) {
        int layers = r.integer("num_hidden_layers");
        int heads = r.integer("num_attention_heads");
        int headDim = r.integerOr("head_dim", DEFAULT_HEAD_DIM);
        r.require("hidden_activation", r.stringOr("hidden_activation", ACTIVATION).equals(ACTIVATION),
                "\"" + ACTIVATION + "\" (GeGLU with the tanh GELU)");
        r.require("attention_bias", !r.boolOr("attention_bias", false), "false (biases on q/k/v and o_proj have no mcore4j"
                + " counterpart)");
        r.require("attn_logit_softcapping", !r.has("attn_logit_softcapping"), "null (soft-capping the attention scores"
                + " is not supported)");
        r.require("final_logit_softcapping", !r.has("final_logit_softcapping"), "null (soft-capping the logits is not"
                + " supported)");
        r.require("use_bidirectional_attention", !r.boolOr("use_bidirectional_attention", false), "false (causal"
                + " attention)");
        double scalar = r.numberOr("query_pre_attn_scalar", DEFAULT_QUERY_PRE_ATTN_SCALAR);
        r.require("query_pre_attn_scalar", scalar > 0, "a positive number");
        TransformerConfig.Builder b = TransformerConfig.builder(layers, r.integer("hidden_size"), heads, r.integer("vocab_size"))
                .queryGroups(r.integerOr("num_key_value_heads", DEFAULT_GROUPS))
                .kvChannels(headDim)
                .ffnHiddenSize(r.integer("intermediate_size"))
                .maxSequenceLength(r.integerOr("max_position_embeddings", DEFAULT_MAX_POSITIONS))
                .normalization(TransformerConfig.Normalization.RMS_NORM, r.numberOr("rms_norm_eps", DEFAULT_EPS))
                .layernormZeroCenteredGamma(true).qkLayernorm(true).postLayernorms(true, true)
                .scaleEmbeddingsBySqrtHidden(true)
                .positionEmbedding(TransformerConfig.PositionEmbedding.ROPE)
                .activation(MlpActivation.GEGLU_TANH).addBiasLinear(false)
                .softmaxScale(scalar == headDim ? 0 : 1 / Math.sqrt(scalar))
                .tiedEmbeddings(r.boolOr("tie_word_embeddings", true))
                .dropout(0, r.numberOr("attention_dropout", 0))
                .initStd(r.numberOr("initializer_range", 0.02));
        TransformerConfig.SlidingWindow window = slidingWindow(r, layers);
        b.slidingWindow(window);
        rope(r, b, window != null);
        return r.build(b);
    }

    /** The windowed layers from {@code layer_types}, else every {@code sliding_window_pattern}-th layer global. */
    private static TransformerConfig.SlidingWindow slidingWindow(ConfigReader r, int layers) {
        List<String> types = r.layerTypes(layers);
        String patternKey = r.has("sliding_window_pattern") ? "sliding_window_pattern" : "_sliding_window_pattern";
        int every = r.integerOr(patternKey, DEFAULT_PATTERN);
        r.require(patternKey, every >= 1, "at least 1");
        List<Boolean> windowed = new ArrayList<>();
        for (int i = 0; i < layers; i++) {
            windowed.add(types.isEmpty() ? (i + 1) % every != 0 : types.get(i).equals(ConfigReader.SLIDING));
        }
        if (!windowed.contains(true)) {
            return null;
        }
        // kept even where it reaches past max_position_embeddings: the sliding layers still rotate with their own base
        int size = r.integerOr("sliding_window", DEFAULT_WINDOW);
        r.require("sliding_window", size >= 1, "at least 1 (the query's own position)");
        return new TransformerConfig.SlidingWindow(size - 1, 0, windowed);
    }

    /** The global layers' RoPE and the sliding layers' base, in transformers 5's nested or 4's flat form. */
    private static void rope(ConfigReader r, TransformerConfig.Builder b, boolean windowed) {
        JsonObject full;
        JsonObject sliding;
        String fullKey;
        String slidingKey;
        if (r.has("rope_parameters")) {
            JsonObject params = r.json.getAsJsonObject("rope_parameters");
            r.require("rope_parameters", params.has("full_attention") || params.has("sliding_attention"),
                    "parameters per layer type (full_attention, sliding_attention)");
            full = params.has("full_attention") && params.get("full_attention").isJsonObject()
                    ? params.getAsJsonObject("full_attention") : null;
            sliding = params.has("sliding_attention") && params.get("sliding_attention").isJsonObject()
                    ? params.getAsJsonObject("sliding_attention") : null;
            fullKey = "rope_parameters.full_attention";
            slidingKey = "rope_parameters.sliding_attention";
        } else {
            full = r.has("rope_scaling") ? r.json.getAsJsonObject("rope_scaling") : null;
            sliding = null;
            fullKey = "rope_scaling";
            slidingKey = "rope_local_base_freq";
        }
        ConfigReader.Rope global = r.rope(fullKey, full, r.numberOr("rope_theta", DEFAULT_GLOBAL_THETA));
        ConfigReader.Rope local = r.rope(slidingKey, sliding, r.numberOr("rope_local_base_freq", DEFAULT_LOCAL_THETA));
        b.rotary(global.theta(), 1.0).ropeScaling(global.scaling());
        if (windowed && !local.equals(global)) {
            r.require(slidingKey, local.scaling() == null, "an unscaled rope for the sliding layers (or the global"
                    + " layers' own)");
            b.localRotaryBase(local.theta());
        }
    }

    /**
     * @param c a model
     * @return whether one of its options is Gemma's alone (mcore4j maps it to no other architecture)
     */
    static boolean isGemma(TransformerConfig c) {
        return c.layernormZeroCenteredGamma() || c.postSelfAttnLayernorm() || c.postMlpLayernorm()
                || c.scaleEmbeddingsBySqrtHidden() || c.activation() == MlpActivation.GEGLU_TANH || c.softmaxScale() > 0
                || c.localRotaryBase() > 0;
    }

    /**
     * Writes the model as a Gemma 3 text config.
     *
     * @param c the model
     * @param j the config object to fill (architecture, vocabulary and initialisation are the caller's)
     * @throws HfCheckpointException if the model lacks one of Gemma 3's options or has one it has not
     */
    static void write(TransformerConfig c, JsonObject j) {
        boolean gemma = c.normalization() == TransformerConfig.Normalization.RMS_NORM && c.layernormZeroCenteredGamma()
                && c.qkLayernorm() && c.postSelfAttnLayernorm() && c.postMlpLayernorm() && c.scaleEmbeddingsBySqrtHidden()
                && c.activation() == MlpActivation.GEGLU_TANH && !c.addBiasLinear() && !c.addQkvBias() && c.usesRope()
                && c.rotaryPercent() == 1 && c.moe() == null;
        if (!gemma) {
            throw new HfCheckpointException("a model with Gemma's options maps to Gemma3ForCausalLM, which needs all of"
                    + " them (zero-centred RMSNorm, query/key and post norms, embeddings scaled by sqrt(hidden), GeGLU, full"
                    + " RoPE) and no biases or experts; got " + c);
        }
        j.addProperty("hidden_size", c.hiddenSize());
        j.addProperty("num_hidden_layers", c.numLayers());
        j.addProperty("num_attention_heads", c.numAttentionHeads());
        j.addProperty("num_key_value_heads", c.numQueryGroups());
        j.addProperty("head_dim", c.kvChannels());
        j.addProperty("intermediate_size", c.ffnHiddenSize());
        j.addProperty("hidden_activation", ACTIVATION);
        j.addProperty("max_position_embeddings", c.maxSequenceLength());
        j.addProperty("rms_norm_eps", c.normEpsilon());
        j.addProperty("attention_bias", false);
        j.addProperty("attention_dropout", c.attentionDropout());
        j.addProperty("tie_word_embeddings", c.tiedEmbeddings());
        j.addProperty("query_pre_attn_scalar", queryPreAttnScalar(c));
        j.add("final_logit_softcapping", com.google.gson.JsonNull.INSTANCE);
        j.add("attn_logit_softcapping", com.google.gson.JsonNull.INSTANCE);
        j.addProperty("use_bidirectional_attention", false);
        if (c.slidingWindow() != null) {
            j.addProperty("sliding_window", c.slidingWindow().size() + 1);
        } else {
            j.add("sliding_window", com.google.gson.JsonNull.INSTANCE);
        }
        j.add("layer_types", HfConfigExport.layerTypes(c));
        JsonObject rope = new JsonObject();
        JsonObject global = HfConfigExport.rope(c.rotaryBase(), c.ropeScaling());
        rope.add("full_attention", global);
        rope.add("sliding_attention", c.localRotaryBase() > 0 ? HfConfigExport.rope(c.localRotaryBase(), null) : global);
        j.add("rope_parameters", rope);
    }

    /** {@code softmax_scale^-2}, an integer where it is one (transformers declares the key an int). */
    private static Number queryPreAttnScalar(TransformerConfig c) {
        if (c.softmaxScale() == 0) {
            return c.kvChannels();
        }
        double scalar = 1 / (c.softmaxScale() * c.softmaxScale());
        long whole = Math.round(scalar);
        return Math.abs(scalar - whole) <= 1e-9 * scalar ? (Number) whole : (Number) scalar;
    }
}
