package io.mcore4j.hf;

import com.google.gson.JsonNull;
import com.google.gson.JsonObject;
import io.mcore4j.models.MoeLayerPattern;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.moe.MoeConfig;
import io.mcore4j.tensorparallel.MlpActivation;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;

/**
 * DeepSeek-V3 ({@code DeepseekV3ForCausalLM}, {@code model_type} {@code deepseek_v3}) in mcore4j's terms, read from
 * and written to its {@code config.json} with transformers' defaults for absent keys:
 * <ul>
 * <li>multi-latent attention ({@link TransformerConfig#multiLatentAttention()}): {@code q_lora_rank} (null: no
 *     query latent), {@code kv_lora_rank}, {@code qk_nope_head_dim} (Megatron's {@code qk_head_dim}),
 *     {@code qk_rope_head_dim} ({@code qk_pos_emb_head_dim}), {@code v_head_dim}, RoPE on interleaved pairs
 *     ({@code rope_interleave}), with YaRN scaling as {@link ConfigReader} maps it;
 * <li>the first {@code first_k_dense_replace} layers dense SwiGLU MLPs of {@code intermediate_size}, the others
 *     mixtures of {@code n_routed_experts} SwiGLU experts of {@code moe_intermediate_size} with
 *     {@code n_shared_experts} of that width fused as one shared expert;
 * <li>transformers' router: sigmoid scores; the choice by the scores plus {@code e_score_correction_bias}
 *     (Megatron's expert bias, {@code --moe-router-enable-expert-bias}) among the {@code topk_group} of
 *     {@code n_group} groups whose two best biased scores sum highest; the weights, without the bias, normalised
 *     over the chosen ({@code norm_topk_prob}) and times {@code routed_scaling_factor}. Megatron-Core scores a group
 *     by its {@code num_experts_per_tok / topk_group} best scores: the same where that is 2 (DeepSeek-V3's 8 / 4),
 *     and refused elsewhere.
 * </ul>
 * Refused by name: an {@code rms_norm_eps} other than 1e-6 (transformers' latent norms always use 1e-6, Megatron-Core's
 * the layers' epsilon), attention biases, {@code rope_interleave} false, {@code norm_topk_prob} false, another
 * {@code scoring_func} or {@code topk_method} than DeepSeek-V3's, {@code moe_layer_freq} other than 1, and a
 * {@code quantization_config} (FP8 weights). The multi-token-prediction layers ({@code num_nextn_predict_layers}),
 * which transformers neither builds nor loads, are left out unless the run asks for them ({@code --mtp-num-layers},
 * {@link HfConfig#multiTokenPredictionLayers()}): then they are the model's depths, and an export writes them back.
 */
final class DeepseekV3Config {
    /** The keys of {@code DeepseekV3Config} (and of DeepSeek's published configs) that shape the network or are checked. */
    static final Set<String> KEYS = Set.of("vocab_size", "hidden_size", "intermediate_size", "moe_intermediate_size",
            "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "n_shared_experts", "n_routed_experts",
            "num_local_experts", "routed_scaling_factor", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim",
            "v_head_dim", "qk_nope_head_dim", "qk_head_dim", "head_dim", "n_group", "topk_group", "num_experts_per_tok",
            "first_k_dense_replace", "norm_topk_prob", "hidden_act", "max_position_embeddings", "initializer_range",
            "rms_norm_eps", "tie_word_embeddings", "rope_parameters", "rope_theta", "rope_scaling", "rope_interleave",
            "attention_bias", "attention_dropout", "num_nextn_predict_layers", "topk_method", "scoring_func",
            "moe_layer_freq", "aux_loss_alpha", "seq_aux", "ep_size", "quantization_config");

    /** DeepseekV3Config's defaults where DeepSeek's configs may leave a key out. */
    private static final double DEFAULT_EPS = 1e-6;
    private static final int DEFAULT_MAX_POSITIONS = 4096;
    private static final int DEFAULT_FIRST_DENSE = 3;
    private static final int DEFAULT_GROUPS = 8;
    private static final int DEFAULT_GROUP_TOPK = 4;
    private static final int DEFAULT_SHARED = 1;
    private static final double DEFAULT_SCALING = 2.5;
    /** transformers scores a group by the sum of its best two biased scores. */
    private static final int GROUP_SCORE_TOP = 2;

    private DeepseekV3Config() {}

    /**
     * @param r the config
     * @return the model
     * @throws HfCheckpointException naming a key whose value mcore4j cannot honour
     */
    static TransformerConfig read(ConfigReader r) {
        int layers = r.integer("num_hidden_layers");
        int heads = r.integer("num_attention_heads");
        r.require("hidden_act", r.stringOr("hidden_act", "silu").equals("silu"), "\"silu\" (SwiGLU)");
        r.require("attention_bias", !r.boolOr("attention_bias", false), "false (MLA's projections have no biases in"
                + " mcore4j)");
        r.require("rope_interleave", r.boolOr("rope_interleave", true), "true (DeepSeek's interleaved rotary pairs)");
        r.require("quantization_config", !r.has("quantization_config"), "absent (FP8 weights are not supported: convert"
                + " them to bf16 first)");
        // transformers' q_a_layernorm and kv_a_layernorm keep RMSNorm's default epsilon whatever rms_norm_eps says;
        // Megatron-Core's latent norms take the layers' epsilon: the two agree only at 1e-6 (DeepSeek-V2's and V3's)
        r.require("rms_norm_eps", r.numberOr("rms_norm_eps", DEFAULT_EPS) == DEFAULT_EPS, DEFAULT_EPS + " (transformers'"
                + " latent norms q_a_layernorm and kv_a_layernorm always use 1e-6, Megatron-Core's the layers' epsilon)");
        r.require("num_key_value_heads", r.integerOr("num_key_value_heads", heads) == heads, "num_attention_heads (" + heads
                + "; MLA gives every head its own keys and values)");
        TransformerConfig.MlaDims dims = new TransformerConfig.MlaDims(r.integerOr("q_lora_rank", 0),
                r.integer("kv_lora_rank"), r.integer("qk_nope_head_dim"), r.integer("qk_rope_head_dim"),
                r.integer("v_head_dim"));
        r.require("qk_head_dim", r.integerOr("qk_head_dim", dims.queryKeyWidth()) == dims.queryKeyWidth(),
                "qk_nope_head_dim + qk_rope_head_dim (" + dims.queryKeyWidth() + ")");
        r.require("head_dim", r.integerOr("head_dim", dims.qkPosEmbHeadDim()) == dims.qkPosEmbHeadDim(),
                "qk_rope_head_dim (" + dims.qkPosEmbHeadDim() + ", the rotary width transformers derives)");
        TransformerConfig.Builder b = TransformerConfig.builder(layers, r.integer("hidden_size"), heads, r.integer("vocab_size"))
                .kvChannels(dims.queryKeyWidth())
                .ffnHiddenSize(r.integer("intermediate_size"))
                .maxSequenceLength(r.integerOr("max_position_embeddings", DEFAULT_MAX_POSITIONS))
                .normalization(TransformerConfig.Normalization.RMS_NORM, r.numberOr("rms_norm_eps", DEFAULT_EPS))
                .positionEmbedding(TransformerConfig.PositionEmbedding.ROPE)
                .activation(MlpActivation.SWIGLU).addBiasLinear(false)
                .tiedEmbeddings(r.boolOr("tie_word_embeddings", false))
                .dropout(0, r.numberOr("attention_dropout", 0))
                .initStd(r.numberOr("initializer_range", 0.02))
                .multiLatentAttention(dims);
        String key = r.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
        ConfigReader.Rope rope = r.rope(key, r.has(key) ? r.json.getAsJsonObject(key) : null, r.numberOr("rope_theta", 10000),
                true);
        b.rotary(rope.theta(), 1.0).ropeScaling(rope.scaling());
        b.moe(experts(r, layers));
        return r.build(b);
    }

    /** The experts of the layers from {@code first_k_dense_replace} on, or null where there are none. */
    private static TransformerConfig.MoeSettings experts(ConfigReader r, int layers) {
        int experts = r.integerAlias("n_routed_experts", "num_local_experts");
        int firstMoe = r.integerOr("first_k_dense_replace", DEFAULT_FIRST_DENSE);
        r.require("moe_layer_freq", r.integerOr("moe_layer_freq", 1) == 1, "1 (every layer from first_k_dense_replace on"
                + " has experts, as transformers builds it)");
        r.require("scoring_func", r.stringOr("scoring_func", "sigmoid").equals("sigmoid"), "\"sigmoid\" (transformers'"
                + " DeepSeek-V3 router)");
        r.require("topk_method", r.stringOr("topk_method", "noaux_tc").equals("noaux_tc"), "\"noaux_tc\" (transformers'"
                + " DeepSeek-V3 router: group-limited, with the score correction bias)");
        if (experts == 0 || firstMoe >= layers) {
            return null;
        }
        int topK = r.integer("num_experts_per_tok");
        r.require("norm_topk_prob", r.boolOr("norm_topk_prob", true), "true (mcore4j's sigmoid router normalises the"
                + " chosen scores)");
        r.require("num_experts_per_tok", topK > 1, "above 1 (with one expert transformers' weight is routed_scaling_factor"
                + " whatever the score, which mcore4j's router does not give)");
        int groups = r.integerOr("n_group", DEFAULT_GROUPS);
        int groupTopK = r.integerOr("topk_group", DEFAULT_GROUP_TOPK);
        r.require("n_group", groups >= 1 && experts % groups == 0, "at least 1 and dividing n_routed_experts (" + experts
                + ")");
        r.require("topk_group", groupTopK >= 1 && groupTopK <= groups, "between 1 and n_group (" + groups + ")");
        boolean limited = groupTopK < groups;
        if (limited) {
            r.require("topk_group", topK % groupTopK == 0 && topK / groupTopK == GROUP_SCORE_TOP
                    && experts / groups >= GROUP_SCORE_TOP, "num_experts_per_tok / topk_group = 2 (transformers scores a"
                    + " group by its best two experts, Megatron-Core by its best num_experts_per_tok / topk_group = "
                    + topK + " / " + groupTopK + ")");
        }
        int moeWidth = r.integer("moe_intermediate_size");
        int shared = r.integerOr("n_shared_experts", DEFAULT_SHARED);
        MoeConfig.Builder m = MoeConfig.builder(experts, topK, moeWidth).routerScore(MoeConfig.RouterScore.SIGMOID)
                .topKScalingFactor(r.numberOr("routed_scaling_factor", DEFAULT_SCALING)).auxLossFree(true)
                .routerInFp32(true).sharedExpertFfnHiddenSize(shared * moeWidth).dispatcher(MoeConfig.Dispatcher.ALL_TO_ALL);
        if (limited) {
            m.groupLimitedRouting(groups, groupTopK);
        }
        List<Integer> pattern = new ArrayList<>();
        for (int i = 0; i < layers; i++) {
            pattern.add(i >= firstMoe ? 1 : 0);
        }
        return new TransformerConfig.MoeSettings(firstMoe == 0 ? MoeLayerPattern.every(1) : MoeLayerPattern.of(pattern),
                m.build());
    }

    /**
     * Writes the model as a DeepSeek-V3 config.
     *
     * @param c the model, with multi-latent attention
     * @param j the config object to fill (architecture, vocabulary and initialisation are the caller's)
     * @throws HfCheckpointException if the model has an option DeepSeek-V3 lacks
     */
    static void write(TransformerConfig c, JsonObject j) {
        TransformerConfig.MlaDims dims = c.multiLatentAttention();
        if (dims == null || c.normalization() != TransformerConfig.Normalization.RMS_NORM
                || c.activation() != MlpActivation.SWIGLU || c.addBiasLinear() || c.layernormZeroCenteredGamma()
                || c.postSelfAttnLayernorm() || c.postMlpLayernorm() || c.scaleEmbeddingsBySqrtHidden()) {
            throw new HfCheckpointException("a model with multi-latent attention maps to DeepseekV3ForCausalLM, which needs"
                    + " RMSNorm, SwiGLU, no biases and plain pre-norms; got " + c);
        }
        j.addProperty("hidden_size", c.hiddenSize());
        j.addProperty("num_hidden_layers", c.numLayers());
        j.addProperty("num_attention_heads", c.numAttentionHeads());
        j.addProperty("num_key_value_heads", c.numAttentionHeads());
        j.addProperty("intermediate_size", c.ffnHiddenSize());
        j.addProperty("hidden_act", "silu");
        j.addProperty("max_position_embeddings", c.maxSequenceLength());
        j.addProperty("rms_norm_eps", c.normEpsilon());
        j.addProperty("attention_bias", false);
        j.addProperty("attention_dropout", c.attentionDropout());
        j.addProperty("tie_word_embeddings", c.tiedEmbeddings());
        if (dims.compressesQueries()) {
            j.addProperty("q_lora_rank", dims.qLoraRank());
        } else {
            j.add("q_lora_rank", JsonNull.INSTANCE);
        }
        j.addProperty("kv_lora_rank", dims.kvLoraRank());
        j.addProperty("qk_nope_head_dim", dims.qkHeadDim());
        j.addProperty("qk_rope_head_dim", dims.qkPosEmbHeadDim());
        j.addProperty("v_head_dim", dims.vHeadDim());
        j.addProperty("rope_interleave", true);
        j.add("rope_parameters", HfConfigExport.rope(c.rotaryBase(), c.ropeScaling()));
        if (c.mtp() != null) {
            // the depths are written as DeepSeek stores them, after the decoder's layers
            j.addProperty("num_nextn_predict_layers", c.mtp().numLayers());
        }
        writeExperts(c, j);
    }

    private static void writeExperts(TransformerConfig c, JsonObject j) {
        if (c.moe() == null) {
            j.addProperty("n_routed_experts", 0);
            j.addProperty("first_k_dense_replace", c.numLayers());
            return;
        }
        MoeConfig m = c.moe().config();
        int firstMoe = 0;
        while (!c.isMoeLayer(firstMoe)) {
            firstMoe++;
        }
        for (int i = firstMoe; i < c.numLayers(); i++) {
            if (!c.isMoeLayer(i)) {
                throw new HfCheckpointException("DeepseekV3ForCausalLM has experts in every layer from first_k_dense_replace"
                        + " on; layer " + i + " of the model is dense after the mixture of experts of layer " + firstMoe);
            }
        }
        boolean groupsMatch = !m.hasGroupLimitedRouting() || m.topK() / m.groupTopK() == GROUP_SCORE_TOP
                && m.topK() % m.groupTopK() == 0;
        int shared = m.sharedExpertFfnHiddenSize() / m.ffnHiddenSize();
        if (m.routerScore() != MoeConfig.RouterScore.SIGMOID || !m.auxLossFree() || m.topK() < 2 || !groupsMatch
                || shared * m.ffnHiddenSize() != m.sharedExpertFfnHiddenSize()) {
            throw new HfCheckpointException("a mixture of experts with multi-latent attention maps to DeepseekV3ForCausalLM,"
                    + " whose router takes sigmoid scores with an expert bias, top-k above 1 normalised, groups scored by"
                    + " their best two experts, and shared experts of the routed experts' width; got " + m);
        }
        j.addProperty("n_routed_experts", m.numExperts());
        j.addProperty("num_experts_per_tok", m.topK());
        j.addProperty("moe_intermediate_size", m.ffnHiddenSize());
        j.addProperty("n_shared_experts", shared);
        j.addProperty("first_k_dense_replace", firstMoe);
        j.addProperty("n_group", m.hasGroupLimitedRouting() ? m.numGroups() : 1);
        j.addProperty("topk_group", m.hasGroupLimitedRouting() ? m.groupTopK() : 1);
        j.addProperty("norm_topk_prob", true);
        j.addProperty("routed_scaling_factor", m.topKScalingFactor());
    }
}
