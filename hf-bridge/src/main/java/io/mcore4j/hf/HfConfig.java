package io.mcore4j.hf;

import ai.djl.ndarray.types.DataType;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParseException;
import com.google.gson.JsonParser;
import io.mcore4j.checkpoint.CommonState;
import io.mcore4j.models.MoeLayerPattern;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.moe.MoeConfig;
import io.mcore4j.tensorparallel.MlpActivation;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;

/**
 * A model's {@code config.json}, checked key by key: every key is either understood (it shapes the
 * {@link TransformerConfig} or is verified to have a value mcore4j can honour) or deliberately
 * ignored (tokenizer ids, generation and bookkeeping fields that do not change the network); any
 * other key, and any understood key with a value mcore4j cannot honour, is an error naming it.
 * Callers may ignore further keys explicitly.
 */
public final class HfConfig {
    /** Keys of {@code PretrainedConfig} that do not change the network's function. */
    static final Set<String> IGNORED = Set.of("_name_or_path", "transformers_version", "torch_dtype", "dtype",
            "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id", "use_cache",
            "architectures", "model_type", "output_attentions", "output_hidden_states", "return_dict", "id2label",
            "label2id", "tokenizer_class", "task_specific_params", "problem_type", "_attn_implementation_autoset",
            "pretraining_tp", "torchscript", "use_bfloat16", "prefix", "finetuning_task");
    private static final Set<String> LLAMA_KEYS = Set.of("vocab_size", "hidden_size", "intermediate_size",
            "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "hidden_act",
            "max_position_embeddings", "rms_norm_eps", "rope_theta", "rope_scaling", "rope_parameters",
            "tie_word_embeddings", "attention_bias", "mlp_bias", "attention_dropout", "initializer_range");
    private static final Set<String> QWEN2_KEYS = Set.of("use_sliding_window", "sliding_window", "max_window_layers",
            "layer_types");
    private static final Set<String> QWEN3_KEYS = QWEN2_KEYS;
    private static final Set<String> MISTRAL_KEYS = Set.of("sliding_window", "layer_types");
    private static final Set<String> MIXTRAL_KEYS = Set.of("sliding_window", "num_local_experts", "num_experts_per_tok",
            "router_aux_loss_coef", "output_router_logits", "router_jitter_noise", "layer_types");
    private static final Set<String> GPT2_KEYS = Set.of("vocab_size", "n_positions", "n_ctx", "n_embd", "n_layer",
            "n_head", "n_inner", "activation_function", "resid_pdrop", "embd_pdrop", "attn_pdrop",
            "layer_norm_epsilon", "initializer_range", "scale_attn_weights", "scale_attn_by_inverse_layer_idx",
            "reorder_and_upcast_attn", "add_cross_attention", "tie_word_embeddings", "summary_type",
            "summary_use_proj", "summary_activation", "summary_proj_to_labels", "summary_first_dropout");

    /**
     * Key of a model's {@code config.json} (as a string) in the common state of an mcore4j checkpoint
     * that {@code convert-hf} or {@code PretrainedGpt.saveCheckpoint} wrote; {@code export-hf} and
     * {@code PretrainedGpt.fromCheckpoint} read it back ({@link #recordedIn}).
     */
    public static final String CHECKPOINT_KEY = "hf_config";
    /** Key of the padded vocabulary (which depends on the tensor-parallel size at save time) beside it. */
    public static final String PADDED_VOCAB_KEY = "padded_vocab_size";

    /** Qwen3Config's {@code head_dim} when config.json leaves it out (not hidden / heads). */
    private static final int QWEN3_HEAD_DIM = 128;

    private final String file;
    private final JsonObject json;
    private final HfArchitecture architecture;
    private final TransformerConfig model;

    private HfConfig(String file, JsonObject json, HfArchitecture architecture, TransformerConfig model) {
        this.file = file;
        this.json = json;
        this.architecture = architecture;
        this.model = model;
    }

    /**
     * Reads and checks {@code dir/config.json}.
     *
     * @param dir the checkpoint directory
     * @param extraIgnoredKeys further keys the caller knowingly ignores
     * @return the config
     * @throws HfCheckpointException naming the file and the key that cannot be honoured
     */
    public static HfConfig read(Path dir, Set<String> extraIgnoredKeys) {
        Path path = dir.resolve("config.json");
        String text;
        try {
            text = Files.readString(path, StandardCharsets.UTF_8);
        } catch (IOException e) {
            throw new HfCheckpointException("cannot read " + path + ": " + e, e);
        }
        JsonObject json;
        try {
            json = JsonParser.parseString(text).getAsJsonObject();
        } catch (RuntimeException e) {
            throw new HfCheckpointException(path + " is not a JSON object: " + e.getMessage(), e);
        }
        return parse(path.toString(), json, extraIgnoredKeys);
    }

    /**
     * Reads and checks {@code dir/config.json} of a directory a user named (a command-line flag, a
     * program's argument), reporting every problem with it as bad input.
     *
     * @param name how the user named the directory, e.g. {@code --load-hf}; it starts every message
     * @param dir the checkpoint directory
     * @param extraIgnoredKeys further keys the caller knowingly ignores
     * @return the config
     * @throws IllegalArgumentException {@code NAME DIR does not exist; expected ...} (or {@code is a file},
     *     {@code has no config.json}), or {@code NAME DIR: } and what is wrong with its config, the
     *     {@link HfCheckpointException} as its cause
     */
    public static HfConfig readInput(String name, Path dir, Set<String> extraIgnoredKeys) {
        requireDirectory(name, dir);
        try {
            return read(dir, extraIgnoredKeys);
        } catch (HfCheckpointException e) {
            throw badInput(name, dir, e);
        }
    }

    /**
     * The config an mcore4j checkpoint records under {@link #CHECKPOINT_KEY}.
     *
     * @param checkpoint the checkpoint directory, for messages
     * @param common its common state
     * @return the config, or null when the checkpoint records none
     * @throws IllegalArgumentException naming the checkpoint when the recorded config is not one mcore4j maps
     */
    public static HfConfig recordedIn(Path checkpoint, CommonState common) {
        if (!common.contains(CHECKPOINT_KEY)) {
            return null;
        }
        try {
            return parse(checkpoint + " " + CHECKPOINT_KEY, JsonParser.parseString(common.getString(CHECKPOINT_KEY))
                    .getAsJsonObject(), Set.of());
        } catch (HfCheckpointException | IllegalStateException | JsonParseException e) {
            throw new IllegalArgumentException("checkpoint " + checkpoint + " records a " + CHECKPOINT_KEY
                    + " that mcore4j cannot use: " + e.getMessage(), e);
        }
    }

    /** Fails naming {@code name} unless {@code dir} is a directory with a config.json. */
    static void requireDirectory(String name, Path dir) {
        if (!Files.isRegularFile(dir.resolve("config.json"))) {
            throw new IllegalArgumentException(name + " " + dir + (Files.isDirectory(dir) ? " has no config.json"
                    : Files.exists(dir) ? " is a file" : " does not exist")
                    + "; expected a Hugging Face checkpoint directory (config.json and safetensors files)");
        }
    }

    /** A checkpoint failure as bad input of the directory the user named. */
    static IllegalArgumentException badInput(String name, Path dir, HfCheckpointException e) {
        return new IllegalArgumentException(name + " " + dir + ": " + e.getMessage(), e);
    }

    /**
     * Checks a parsed config.
     *
     * @param file where it came from, for errors
     * @param json the config object (not modified)
     * @param extraIgnoredKeys further keys the caller knowingly ignores
     * @return the config
     */
    public static HfConfig parse(String file, JsonObject json, Set<String> extraIgnoredKeys) {
        JsonObject copy = json.deepCopy();
        if (!copy.has("architectures") || !copy.get("architectures").isJsonArray() || copy.getAsJsonArray("architectures").size() != 1) {
            throw new HfCheckpointException(file + ": \"architectures\" must list exactly one model class, got "
                    + copy.get("architectures"));
        }
        HfArchitecture arch = HfArchitecture.of(copy.getAsJsonArray("architectures").get(0).getAsString(), file);
        Set<String> understood = new TreeSet<>(arch.isLlamaFamily() ? LLAMA_KEYS : GPT2_KEYS);
        understood.addAll(switch (arch) {
            case QWEN2 -> QWEN2_KEYS;
            case QWEN3 -> QWEN3_KEYS;
            case MISTRAL -> MISTRAL_KEYS;
            case MIXTRAL -> MIXTRAL_KEYS;
            default -> Set.<String>of();
        });
        List<String> unknown = new ArrayList<>();
        for (String key : copy.keySet()) {
            if (!understood.contains(key) && !IGNORED.contains(key) && !extraIgnoredKeys.contains(key)) {
                unknown.add(key);
            }
        }
        if (!unknown.isEmpty()) {
            throw new HfCheckpointException(file + ": config keys " + unknown + " are not understood for "
                    + arch.className() + " (understood: " + understood + "; ignored as not changing the network: "
                    + new TreeSet<>(IGNORED) + "); pass them as ignored keys only if they do not change the model");
        }
        Reader r = new Reader(file, copy);
        TransformerConfig model = arch.isLlamaFamily() ? llama(arch, r) : gpt2(r);
        return new HfConfig(file, copy, arch, model);
    }

    private static TransformerConfig llama(HfArchitecture arch, Reader r) {
        int hidden = r.integer("hidden_size");
        int heads = r.integer("num_attention_heads");
        TransformerConfig.Builder b = TransformerConfig.builder(r.integer("num_hidden_layers"), hidden, heads,
                        r.integer("vocab_size"))
                .queryGroups(r.integerOr("num_key_value_heads", heads))
                .ffnHiddenSize(r.integer("intermediate_size"))
                .maxSequenceLength(r.integer("max_position_embeddings"))
                .normalization(TransformerConfig.Normalization.RMS_NORM, r.numberOr("rms_norm_eps", 1e-6))
                .positionEmbedding(TransformerConfig.PositionEmbedding.ROPE)
                .activation(MlpActivation.SWIGLU)
                .tiedEmbeddings(r.boolOr("tie_word_embeddings", false))
                .dropout(0, r.numberOr("attention_dropout", 0))
                .initStd(r.numberOr("initializer_range", 0.02));
        if (r.has("head_dim")) {
            b.kvChannels(r.integer("head_dim"));
        } else if (arch == HfArchitecture.QWEN3) {
            b.kvChannels(QWEN3_HEAD_DIM);
        }
        r.require("hidden_act", "silu".equals(r.string("hidden_act")), "\"silu\" (SwiGLU)");
        boolean attentionBias = r.boolOr("attention_bias", false);
        if (arch == HfArchitecture.QWEN3) {
            // Qwen3's attention_bias puts biases on o_proj as well as q/k/v, never on the MLP: mcore4j has
            // QKV biases alone (add_qkv_bias) or biases on every linear (add_bias_linear), neither of which is that
            r.require("attention_bias", !attentionBias, "false (biases on q/k/v and o_proj but not on the MLP have no"
                    + " mcore4j counterpart)");
            r.require("mlp_bias", !r.boolOr("mlp_bias", false), "false or absent (Qwen3's MLP has no biases)");
            b.addBiasLinear(false).qkLayernorm(true);
        } else {
            boolean mlpBias = r.boolOr("mlp_bias", false);
            r.require("attention_bias", attentionBias == mlpBias, "equal to mlp_bias (mcore4j's add_bias_linear covers both)");
            b.addBiasLinear(attentionBias && mlpBias);
        }
        b.addQkvBias(arch == HfArchitecture.QWEN2);
        rope(r, b);
        if (arch == HfArchitecture.QWEN2 || arch == HfArchitecture.QWEN3) {
            // transformers builds no window unless use_sliding_window is set, whatever sliding_window says
            r.require("use_sliding_window", !r.boolOr("use_sliding_window", false), "false (sliding_window = "
                    + r.json.get("sliding_window") + " would apply; sliding-window attention is not supported yet)");
        } else if (r.has("sliding_window")) {
            int window = r.integer("sliding_window");
            r.require("sliding_window", window >= r.integer("max_position_embeddings"),
                    "null or at least max_position_embeddings (sliding-window attention is not supported)");
        }
        if (r.has("layer_types")) {
            for (JsonElement t : r.json.getAsJsonArray("layer_types")) {
                r.require("layer_types", "full_attention".equals(t.getAsString()), "\"full_attention\" for every layer");
            }
        }
        if (arch == HfArchitecture.MIXTRAL) {
            r.require("router_jitter_noise", r.numberOr("router_jitter_noise", 0) == 0, "0 (router input jitter is not mapped)");
            double aux = r.boolOr("output_router_logits", false) ? r.numberOr("router_aux_loss_coef", 0.001) : 0;
            b.moe(TransformerConfig.MoeSettings.of(r.integer("num_local_experts"), r.integer("num_experts_per_tok"),
                    MoeLayerPattern.every(1), r.integer("intermediate_size"), aux, MoeConfig.Dispatcher.ALL_TO_ALL));
        }
        return r.build(b);
    }

    /**
     * Mixtral routes by the softmax over each token's top-k logits to routed experts alone: a model whose layers
     * compute something else would be exported as a different model.
     */
    private static void refuseRoutingMixtralLacks(MoeConfig m) {
        if (m.routerScore() != MoeConfig.RouterScore.SOFTMAX || m.preSoftmax() || m.hasGroupLimitedRouting()
                || m.topKScalingFactor() != 1 || m.auxLossFree() || m.sharedExpertFfnHiddenSize() > 0) {
            throw new HfCheckpointException("a mixture of experts maps to MixtralForCausalLM, which routes by the softmax of"
                    + " the top-k logits to routed experts only; got " + m.routerScore() + " scores"
                    + (m.preSoftmax() ? " before the top-k" : "") + (m.hasGroupLimitedRouting() ? ", group-limited routing" : "")
                    + (m.topKScalingFactor() != 1 ? ", top-k scaling " + m.topKScalingFactor() : "")
                    + (m.auxLossFree() ? ", an expert bias" : "")
                    + (m.sharedExpertFfnHiddenSize() > 0 ? ", a shared expert" : ""));
        }
    }

    /** {@code rope_theta}/{@code rope_scaling} (transformers 4) or {@code rope_parameters} (transformers 5). */
    private static void rope(Reader r, TransformerConfig.Builder b) {
        JsonObject scaling = r.has("rope_parameters") ? r.json.getAsJsonObject("rope_parameters")
                : r.has("rope_scaling") ? r.json.getAsJsonObject("rope_scaling") : null;
        double theta = r.numberOr("rope_theta", 10000);
        if (scaling != null && scaling.has("rope_theta")) {
            theta = scaling.get("rope_theta").getAsDouble();
        }
        b.rotary(theta, 1.0);
        if (scaling == null) {
            return;
        }
        String key = r.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
        String type = scaling.has("rope_type") ? scaling.get("rope_type").getAsString()
                : scaling.has("type") ? scaling.get("type").getAsString() : "default";
        if (type.equals("default")) {
            return;
        }
        r.require(key, type.equals("llama3"), "of type \"default\" or \"llama3\", got \"" + type + "\"");
        Reader s = new Reader(r.file + " " + key, scaling);
        b.ropeScaling(new TransformerConfig.RopeScaling(s.number("factor"), s.number("low_freq_factor"),
                s.number("high_freq_factor"), s.integer("original_max_position_embeddings")));
    }

    private static TransformerConfig gpt2(Reader r) {
        int hidden = r.integer("n_embd");
        String act = r.stringOr("activation_function", "gelu_new");
        MlpActivation activation = switch (act) {
            case "gelu_new", "gelu_pytorch_tanh" -> MlpActivation.GELU_TANH;
            case "gelu" -> MlpActivation.GELU;
            default -> {
                r.require("activation_function", false, "gelu_new, gelu_pytorch_tanh or gelu");
                yield null;
            }
        };
        double resid = r.numberOr("resid_pdrop", 0.1);
        r.require("embd_pdrop", r.numberOr("embd_pdrop", 0.1) == resid, "equal to resid_pdrop (one hidden dropout)");
        r.require("scale_attn_weights", r.boolOr("scale_attn_weights", true), "true");
        r.require("scale_attn_by_inverse_layer_idx", !r.boolOr("scale_attn_by_inverse_layer_idx", false), "false");
        r.require("add_cross_attention", !r.boolOr("add_cross_attention", false), "false");
        r.require("tie_word_embeddings", r.boolOr("tie_word_embeddings", true), "true (GPT-2's head is tied)");
        TransformerConfig.Builder b = TransformerConfig.builder(r.integer("n_layer"), hidden, r.integer("n_head"),
                        r.integer("vocab_size"))
                .ffnHiddenSize(r.integerOr("n_inner", 4 * hidden))
                .maxSequenceLength(r.integer("n_positions"))
                .normalization(TransformerConfig.Normalization.LAYER_NORM, r.numberOr("layer_norm_epsilon", 1e-5))
                .positionEmbedding(TransformerConfig.PositionEmbedding.LEARNED_ABSOLUTE)
                .activation(activation).addBiasLinear(true).tiedEmbeddings(true)
                .dropout(resid, r.numberOr("attn_pdrop", 0.1))
                .initStd(r.numberOr("initializer_range", 0.02));
        return r.build(b);
    }

    /**
     * The Hugging Face config of a model mcore4j built itself (for {@link HfExport}): LLaMA for
     * RMSNorm + SwiGLU + RoPE (Qwen2 with QKV biases only, Qwen3 with query and key norms, Mixtral
     * with experts in every layer),
     * GPT-2 for LayerNorm + GELU + learned positions with biases and a tied head.
     *
     * @param c the model's config
     * @param vocabSize the tokenizer's vocabulary (at most the model's padded one)
     * @return the config
     * @throws HfCheckpointException if no supported architecture has the model's shape
     */
    public static HfConfig forModel(TransformerConfig c, int vocabSize) {
        JsonObject j = new JsonObject();
        HfArchitecture arch;
        if (c.normalization() == TransformerConfig.Normalization.LAYER_NORM) {
            arch = HfArchitecture.GPT2;
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
            if (c.activation() == MlpActivation.SWIGLU || !c.addBiasLinear() || c.usesRope()) {
                throw new HfCheckpointException("a LayerNorm model maps to GPT2LMHeadModel, which needs GELU, biases and "
                        + "learned positions; got " + c.activation() + ", bias " + c.addBiasLinear() + ", " + c.positionEmbedding());
            }
        } else {
            arch = c.moe() != null ? HfArchitecture.MIXTRAL
                    : c.qkLayernorm() ? HfArchitecture.QWEN3
                    : c.addQkvBias() && !c.addBiasLinear() ? HfArchitecture.QWEN2 : HfArchitecture.LLAMA;
            j.addProperty("hidden_size", c.hiddenSize());
            j.addProperty("num_hidden_layers", c.numLayers());
            j.addProperty("num_attention_heads", c.numAttentionHeads());
            j.addProperty("num_key_value_heads", c.numQueryGroups());
            j.addProperty("head_dim", c.kvChannels());
            j.addProperty("intermediate_size", c.moe() != null ? c.moe().ffnHiddenSize() : c.ffnHiddenSize());
            j.addProperty("hidden_act", "silu");
            j.addProperty("max_position_embeddings", c.maxSequenceLength());
            j.addProperty("rms_norm_eps", c.normEpsilon());
            j.addProperty("attention_dropout", c.attentionDropout());
            j.addProperty("tie_word_embeddings", c.tiedEmbeddings());
            if (arch == HfArchitecture.LLAMA) {
                j.addProperty("attention_bias", c.addBiasLinear());
                j.addProperty("mlp_bias", c.addBiasLinear());
            }
            if (arch == HfArchitecture.QWEN3) {
                j.addProperty("attention_bias", false);
                j.addProperty("use_sliding_window", false);
                if (c.addBiasLinear() || c.addQkvBias()) {
                    throw new HfCheckpointException("a model with query and key norms maps to Qwen3ForCausalLM, which has no"
                            + " biases here; got add_bias_linear " + c.addBiasLinear() + ", add_qkv_bias " + c.addQkvBias());
                }
            }
            if (c.qkLayernorm() && c.moe() != null) {
                throw new HfCheckpointException("a mixture-of-experts model with query and key norms (Qwen3-MoE) cannot be"
                        + " exported yet; got " + c);
            }
            JsonObject rope = new JsonObject();
            rope.addProperty("rope_theta", c.rotaryBase());
            TransformerConfig.RopeScaling s = c.ropeScaling();
            rope.addProperty("rope_type", s == null ? "default" : "llama3");
            if (s != null) {
                rope.addProperty("factor", s.factor());
                rope.addProperty("low_freq_factor", s.lowFreqFactor());
                rope.addProperty("high_freq_factor", s.highFreqFactor());
                rope.addProperty("original_max_position_embeddings", s.originalMaxPositions());
            }
            j.add("rope_parameters", rope);
            if (c.moe() != null) {
                refuseRoutingMixtralLacks(c.moe().config());
                j.addProperty("num_local_experts", c.moe().numExperts());
                j.addProperty("num_experts_per_tok", c.moe().topK());
                j.addProperty("output_router_logits", c.moe().auxLossCoeff() > 0);
                j.addProperty("router_aux_loss_coef", c.moe().auxLossCoeff());
            }
            if (c.activation() != MlpActivation.SWIGLU || !c.usesRope() || c.rotaryPercent() != 1
                    || c.moe() != null && c.moe().layers().count(c.numLayers()) != c.numLayers()) {
                throw new HfCheckpointException("an RMSNorm model maps to " + arch.className() + ", which needs SwiGLU and "
                        + "full rotary embeddings (and experts in every layer); got " + c);
            }
        }
        j.add("architectures", new com.google.gson.JsonArray());
        j.getAsJsonArray("architectures").add(arch.className());
        j.addProperty("model_type", arch.modelType());
        j.addProperty("vocab_size", vocabSize);
        j.addProperty("initializer_range", c.initStd());
        HfConfig parsed = parse("the config of " + arch.className() + " made from the model", j, Set.of());
        TransformerConfig back = withVocab(parsed.transformerConfig(), c.vocabSize());
        if (back.numLayers() != c.numLayers() || back.kvChannels() != c.kvChannels() || back.tiedEmbeddings() != c.tiedEmbeddings()
                || back.qkLayernorm() != c.qkLayernorm() || back.addQkvBias() != c.addQkvBias()) {
            throw new HfCheckpointException("the model does not round-trip through " + arch.className() + "'s config: " + c);
        }
        return parsed;
    }

    /** @return the architecture */
    public HfArchitecture architecture() {
        return architecture;
    }

    /** @return the vocabulary size of the checkpoint (unpadded) */
    public int vocabSize() {
        return model.vocabSize();
    }

    /** @return a copy of the JSON object */
    public JsonObject json() {
        return json.deepCopy();
    }

    /** @return the file the config came from */
    public String file() {
        return file;
    }

    /**
     * The model as mcore4j builds it, float32, unpadded vocabulary, no recompute or sequence
     * parallelism; adjust with {@link TransformerConfig#toBuilder()} (dtype, dropout, recompute)
     * but keep the shapes.
     *
     * @return the config
     */
    public TransformerConfig transformerConfig() {
        return model;
    }

    /**
     * The model with its vocabulary padded as Megatron pads it: up to a multiple of
     * {@code divisor x tensorParallel} ({@code --make-vocab-size-divisible-by}, default 128). Padded
     * rows of the embedding and output layer are zero on import and dropped on export.
     *
     * @param divisor the vocabulary divisor, at least 1
     * @param tensorParallel the tensor-parallel size
     * @param dtype the parameter dtype, FLOAT32 or FLOAT16
     * @return the config
     */
    public TransformerConfig transformerConfig(int divisor, int tensorParallel, DataType dtype) {
        if (divisor < 1 || tensorParallel < 1) {
            throw new IllegalArgumentException("vocab divisor " + divisor + " and tensor parallel size "
                    + tensorParallel + " must be positive");
        }
        long multiple = (long) divisor * tensorParallel;
        int padded = (int) ((model.vocabSize() + multiple - 1) / multiple * multiple);
        return withVocab(model, padded).toBuilder().dtype(dtype).build();
    }

    /**
     * The model with its vocabulary padded to a given size, e.g. the size a checkpoint saved under
     * another tensor-parallel size has.
     *
     * @param paddedVocab the padded vocabulary, at least {@link #vocabSize()}
     * @param dtype the parameter dtype, FLOAT32 or FLOAT16
     * @return the config
     */
    public TransformerConfig transformerConfigPaddedTo(int paddedVocab, DataType dtype) {
        if (paddedVocab < model.vocabSize()) {
            throw new IllegalArgumentException("padded vocabulary " + paddedVocab + " is smaller than the checkpoint's "
                    + model.vocabSize());
        }
        return withVocab(model, paddedVocab).toBuilder().dtype(dtype).build();
    }

    /** The same config with another vocabulary size (the builder takes the vocabulary up front). */
    static TransformerConfig withVocab(TransformerConfig c, int vocab) {
        return TransformerConfig.builder(c.numLayers(), c.hiddenSize(), c.numAttentionHeads(), vocab)
                .queryGroups(c.numQueryGroups()).ffnHiddenSize(c.ffnHiddenSize()).kvChannels(c.kvChannels())
                .maxSequenceLength(c.maxSequenceLength()).normalization(c.normalization(), c.normEpsilon())
                .positionEmbedding(c.positionEmbedding()).rotary(c.rotaryBase(), c.rotaryPercent())
                .activation(c.activation()).addBiasLinear(c.addBiasLinear()).tiedEmbeddings(c.tiedEmbeddings())
                .dropout(c.hiddenDropout(), c.attentionDropout()).initStd(c.initStd()).recompute(c.recompute())
                .sequenceParallel(c.sequenceParallel()).dtype(c.dtype()).moe(c.moe()).addQkvBias(c.addQkvBias())
                .cpCommType(c.cpCommType()).hierarchicalContextParallelSizes(c.hierarchicalContextParallelSizes())
                .ropeScaling(c.ropeScaling()).tpCommOverlap(c.tpCommOverlap())
                .qkLayernorm(c.qkLayernorm()).build();
    }

    /** Typed access to the config's values, errors naming file and key; JSON nulls count as absent. */
    private static final class Reader {
        private final String file;
        private final JsonObject json;

        Reader(String file, JsonObject json) {
            this.file = file;
            this.json = json;
        }

        boolean has(String key) {
            return json.has(key) && !json.get(key).isJsonNull();
        }

        private JsonElement get(String key) {
            if (!has(key)) {
                throw new HfCheckpointException(file + ": required key \"" + key + "\" is missing");
            }
            return json.get(key);
        }

        int integer(String key) {
            try {
                double v = get(key).getAsDouble();
                if (v != Math.rint(v) || v < 0 || v > Integer.MAX_VALUE) {
                    throw new NumberFormatException(String.valueOf(v));
                }
                return (int) v;
            } catch (RuntimeException e) {
                if (e instanceof HfCheckpointException h) {
                    throw h;
                }
                throw new HfCheckpointException(file + ": \"" + key + "\" must be a non-negative integer, got " + json.get(key));
            }
        }

        int integerOr(String key, int fallback) {
            return has(key) ? integer(key) : fallback;
        }

        double number(String key) {
            try {
                return get(key).getAsDouble();
            } catch (RuntimeException e) {
                if (e instanceof HfCheckpointException h) {
                    throw h;
                }
                throw new HfCheckpointException(file + ": \"" + key + "\" must be a number, got " + json.get(key));
            }
        }

        double numberOr(String key, double fallback) {
            return has(key) ? number(key) : fallback;
        }

        boolean boolOr(String key, boolean fallback) {
            if (!has(key)) {
                return fallback;
            }
            JsonElement e = json.get(key);
            if (!e.isJsonPrimitive() || !e.getAsJsonPrimitive().isBoolean()) {
                throw new HfCheckpointException(file + ": \"" + key + "\" must be true or false, got " + e);
            }
            return e.getAsBoolean();
        }

        String string(String key) {
            return get(key).getAsString();
        }

        String stringOr(String key, String fallback) {
            return has(key) ? string(key) : fallback;
        }

        void require(String key, boolean ok, String expected) {
            if (!ok) {
                throw new HfCheckpointException(file + ": \"" + key + "\" = " + json.get(key) + " is not supported: expected "
                        + expected);
            }
        }

        TransformerConfig build(TransformerConfig.Builder b) {
            try {
                return b.build();
            } catch (IllegalArgumentException e) {
                throw new HfCheckpointException(file + ": " + e.getMessage(), e);
            }
        }
    }

    @Override
    public String toString() {
        return "HfConfig{" + architecture.className() + " from " + file + ", " + model + "}";
    }
}
