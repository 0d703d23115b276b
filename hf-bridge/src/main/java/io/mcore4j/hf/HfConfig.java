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
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
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
            "pretraining_tp", "torchscript", "use_bfloat16", "prefix", "finetuning_task", "cache_implementation");
    private static final Set<String> LLAMA_KEYS = Set.of("vocab_size", "hidden_size", "intermediate_size",
            "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "hidden_act",
            "max_position_embeddings", "rms_norm_eps", "rope_theta", "rope_scaling", "rope_parameters",
            "tie_word_embeddings", "attention_bias", "mlp_bias", "attention_dropout", "initializer_range");
    private static final Set<String> QWEN2_KEYS = Set.of("use_sliding_window", "sliding_window", "max_window_layers",
            "layer_types");
    private static final Set<String> QWEN3_KEYS = QWEN2_KEYS;
    /**
     * Qwen3-MoE's keys; {@code max_window_layers}, which its published configs carry, is read by no Qwen3-MoE layer in
     * transformers 5 (and a window is refused), so it is understood as inert. transformers 5 writes {@code num_experts}
     * as {@code num_local_experts}.
     */
    private static final Set<String> QWEN3_MOE_KEYS = Set.of("use_sliding_window", "sliding_window", "max_window_layers",
            "decoder_sparse_step", "mlp_only_layers", "moe_intermediate_size", "num_experts", "num_local_experts",
            "num_experts_per_tok", "norm_topk_prob", "output_router_logits", "router_aux_loss_coef");
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
    /** Qwen2Config's and Qwen3Config's {@code max_window_layers} default: the first layer with a window. */
    private static final int QWEN_MAX_WINDOW_LAYERS = 28;

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
     * What an mcore4j checkpoint's common state records of this config (the writer's side of {@link #recordedIn}):
     * {@link #CHECKPOINT_KEY} and {@link #PADDED_VOCAB_KEY}.
     *
     * @param paddedVocab the model's padded vocabulary at save time
     * @return the two entries, in that order
     */
    public Map<String, Object> checkpointEntries(int paddedVocab) {
        Map<String, Object> entries = new LinkedHashMap<>();
        entries.put(CHECKPOINT_KEY, json().toString());
        entries.put(PADDED_VOCAB_KEY, (long) paddedVocab);
        return entries;
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
        Set<String> understood = new TreeSet<>(arch == HfArchitecture.GEMMA3 ? Gemma3TextConfig.KEYS
                : arch == HfArchitecture.DEEPSEEK_V3 ? DeepseekV3Config.KEYS : arch.isLlamaFamily() ? LLAMA_KEYS : GPT2_KEYS);
        understood.addAll(switch (arch) {
            case QWEN2 -> QWEN2_KEYS;
            case QWEN3 -> QWEN3_KEYS;
            case QWEN3_MOE -> QWEN3_MOE_KEYS;
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
        ConfigReader r = new ConfigReader(file, copy);
        TransformerConfig model = arch == HfArchitecture.GEMMA3 ? Gemma3TextConfig.read(r)
                : arch == HfArchitecture.DEEPSEEK_V3 ? DeepseekV3Config.read(r)
                : arch.isLlamaFamily() ? llama(arch, r) : gpt2(r);
        return new HfConfig(file, copy, arch, model);
    }

    private static TransformerConfig llama(HfArchitecture arch, ConfigReader r) {
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
        if (arch == HfArchitecture.QWEN3 || arch == HfArchitecture.QWEN3_MOE) {
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
        b.slidingWindow(slidingWindow(arch, r));
        if (arch == HfArchitecture.MIXTRAL) {
            r.require("router_jitter_noise", r.numberOr("router_jitter_noise", 0) == 0, "0 (router input jitter is not mapped)");
            b.moe(TransformerConfig.MoeSettings.of(r.integer("num_local_experts"), r.integer("num_experts_per_tok"),
                    MoeLayerPattern.every(1), r.integer("intermediate_size"), routerAuxLoss(r), MoeConfig.Dispatcher.ALL_TO_ALL));
        }
        if (arch == HfArchitecture.QWEN3_MOE) {
            b.moe(qwen3Moe(r));
        }
        return r.build(b);
    }

    /** The load-balancing loss coefficient transformers trains with: {@code router_aux_loss_coef} where the router's logits are output. */
    private static double routerAuxLoss(ConfigReader r) {
        return r.boolOr("output_router_logits", false) ? r.numberOr("router_aux_loss_coef", 0.001) : 0;
    }

    /**
     * Qwen3-MoE's experts. Layer {@code i} has them when {@code num_experts > 0}, {@code (i + 1) % decoder_sparse_step
     * == 0} and {@code i} is not in {@code mlp_only_layers} (an explicit Megatron layer pattern, as Megatron's
     * {@code moe_layer_freq} counts from layer 0). The router's softmax over all experts, top-k, then (with
     * {@code norm_topk_prob}) division by the chosen probabilities' sum is the softmax over the top-k logits, Megatron's
     * default; without it, the top-k of the softmax is Megatron's {@code moe_router_pre_softmax}.
     *
     * @return the settings, or null where no layer has experts
     */
    private static TransformerConfig.MoeSettings qwen3Moe(ConfigReader r) {
        int layers = r.integer("num_hidden_layers");
        int experts = r.integerAlias("num_experts", "num_local_experts");
        int step = r.integerOr("decoder_sparse_step", 1);
        r.require("decoder_sparse_step", step >= 1, "at least 1");
        java.util.Set<Integer> dense = new java.util.TreeSet<>();
        if (r.has("mlp_only_layers")) {
            JsonElement list = r.get("mlp_only_layers");
            r.require("mlp_only_layers", list.isJsonArray(), "a list of layer indices");
            for (JsonElement e : list.getAsJsonArray()) {
                boolean index = e.isJsonPrimitive() && e.getAsJsonPrimitive().isNumber() && e.getAsDouble() == Math.rint(
                        e.getAsDouble()) && e.getAsDouble() >= 0 && e.getAsDouble() < layers;
                r.require("mlp_only_layers", index, "layer indices in [0, " + layers + ")");
                dense.add(e.getAsInt());
            }
        }
        List<Integer> pattern = new ArrayList<>();
        for (int i = 0; i < layers; i++) {
            pattern.add(experts > 0 && (i + 1) % step == 0 && !dense.contains(i) ? 1 : 0);
        }
        if (!pattern.contains(1)) {
            return null;
        }
        int topK = r.integer("num_experts_per_tok");
        boolean normTopK = r.boolOr("norm_topk_prob", false);
        r.require("num_experts_per_tok", topK > 1 || !normTopK, "above 1 with norm_topk_prob (every weight would be 1,"
                + " which Megatron-Core's router refuses as giving it no gradient)");
        MoeLayerPattern layerPattern = pattern.contains(0) ? MoeLayerPattern.of(pattern) : MoeLayerPattern.every(1);
        return new TransformerConfig.MoeSettings(layerPattern, MoeConfig.builder(experts, topK,
                        r.integer("moe_intermediate_size")).preSoftmax(!normTopK).auxLossCoeff(routerAuxLoss(r))
                .dispatcher(MoeConfig.Dispatcher.ALL_TO_ALL).build());
    }

    /**
     * The sliding window as transformers applies it: Mistral's {@code sliding_window} on every layer (its
     * {@code layer_types}, which MistralModel does not read, only checked), Qwen2's and Qwen3's on the layers
     * {@code layer_types} calls {@code sliding_attention} (by default those from {@code max_window_layers} on) and
     * only with {@code use_sliding_window}. A window of {@code W} tokens (the query's own included) is
     * Megatron's {@code window_size} {@code W - 1}; a window no shorter than {@code max_position_embeddings}
     * never cuts anything and is left out.
     *
     * @return the window, or null
     */
    private static TransformerConfig.SlidingWindow slidingWindow(HfArchitecture arch, ConfigReader r) {
        int layers = r.integer("num_hidden_layers");
        List<String> types = r.layerTypes(layers);
        boolean windowed = switch (arch) {
            case QWEN2, QWEN3 -> r.boolOr("use_sliding_window", false);
            case QWEN3_MOE -> {
                r.require("use_sliding_window", !r.boolOr("use_sliding_window", false), "false (Qwen3-MoE's sliding window"
                        + " is not supported yet)");
                yield false;
            }
            case MISTRAL, MIXTRAL -> true;
            default -> false;
        };
        if (!windowed || !r.has("sliding_window")) {
            return null;
        }
        int window = r.integer("sliding_window");
        r.require("sliding_window", window >= 1, "at least 1 (the query's own position)");
        if (window >= r.integer("max_position_embeddings")) {
            return null;
        }
        if (arch == HfArchitecture.MIXTRAL) {
            r.require("sliding_window", false, "null or at least max_position_embeddings (Mixtral's sliding window is"
                    + " not supported yet)");
        }
        if (arch == HfArchitecture.MISTRAL) {
            return TransformerConfig.SlidingWindow.everyLayer(window - 1);
        }
        List<Boolean> pattern = new ArrayList<>();
        int first = r.integerOr("max_window_layers", QWEN_MAX_WINDOW_LAYERS);
        for (int i = 0; i < layers; i++) {
            pattern.add(types.isEmpty() ? i >= first : types.get(i).equals(ConfigReader.SLIDING));
        }
        return pattern.contains(true) ? new TransformerConfig.SlidingWindow(window - 1, 0, pattern) : null;
    }

    /** {@code rope_theta}/{@code rope_scaling} (transformers 4) or {@code rope_parameters} (transformers 5). */
    private static void rope(ConfigReader r, TransformerConfig.Builder b) {
        String key = r.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
        ConfigReader.Rope rope = r.rope(key, r.has(key) ? r.json.getAsJsonObject(key) : null, r.numberOr("rope_theta", 10000));
        b.rotary(rope.theta(), 1.0).ropeScaling(rope.scaling());
    }

    private static TransformerConfig gpt2(ConfigReader r) {
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
     * The Hugging Face config of a model mcore4j built itself (for {@link HfExport}): see {@link HfConfigExport}.
     *
     * @param c the model's config
     * @param vocabSize the tokenizer's vocabulary (at most the model's padded one)
     * @return the config
     * @throws HfCheckpointException if no supported architecture has the model's shape
     */
    public static HfConfig forModel(TransformerConfig c, int vocabSize) {
        return HfConfigExport.forModel(c, vocabSize);
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

    /**
     * The multi-token prediction layers the checkpoint stores after the decoder's: DeepSeek-V3's
     * {@code num_nextn_predict_layers} (transformers' default 1 where absent; transformers neither builds nor loads
     * them, so a checkpoint it saved has none whatever this says), 0 for every other architecture. A model built
     * with {@link TransformerConfig#mtp()} reads them as its depths.
     *
     * @return the number of layers
     */
    public int multiTokenPredictionLayers() {
        if (architecture != HfArchitecture.DEEPSEEK_V3) {
            return 0;
        }
        return new ConfigReader(file, json).integerOr("num_nextn_predict_layers", 1);
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
        return model.toBuilder().vocabSize(padded).dtype(dtype).build();
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
        return model.toBuilder().vocabSize(paddedVocab).dtype(dtype).build();
    }

    @Override
    public String toString() {
        return "HfConfig{" + architecture.className() + " from " + file + ", " + model + "}";
    }
}
