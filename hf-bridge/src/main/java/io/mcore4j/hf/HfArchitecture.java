package io.mcore4j.hf;

import java.util.Arrays;
import java.util.stream.Collectors;

/**
 * The Hugging Face model classes the bridge imports and exports, by their {@code architectures}
 * name in {@code config.json}.
 */
public enum HfArchitecture {
    /** LLaMA 2/3: RMSNorm, SwiGLU, RoPE (optionally LLaMA 3.1 scaled), grouped queries. */
    LLAMA("LlamaForCausalLM", "llama"),
    /**
     * Qwen2: LLaMA's shape with biases on the query, key and value projections; with {@code use_sliding_window}, a
     * sliding window on the layers {@code layer_types} (or {@code max_window_layers}) names.
     */
    QWEN2("Qwen2ForCausalLM", "qwen2"),
    /**
     * Qwen3: LLaMA's shape with an RMSNorm over each query and key head before RoPE (QK-norm), no
     * biases, and a head dimension of its own ({@code head_dim}); sliding windows as Qwen2's.
     */
    QWEN3("Qwen3ForCausalLM", "qwen3"),
    /**
     * Qwen3-MoE: Qwen3's attention (QK-norm, {@code head_dim}), each MLP either a top-k mixture of fine-grained SwiGLU
     * experts ({@code moe_intermediate_size} wide, routed by the softmax over all experts, with {@code norm_topk_prob}
     * renormalised over the chosen ones) or, on the layers {@code mlp_only_layers} and {@code decoder_sparse_step}
     * leave dense, a SwiGLU MLP of {@code intermediate_size}.
     */
    QWEN3_MOE("Qwen3MoeForCausalLM", "qwen3_moe"),
    /** Mistral: LLaMA's shape without biases, with a sliding window ({@code sliding_window}) on every layer. */
    MISTRAL("MistralForCausalLM", "mistral"),
    /** Mixtral: Mistral's attention (a sliding window is refused for now), every MLP a top-k mixture of SwiGLU experts. */
    MIXTRAL("MixtralForCausalLM", "mixtral"),
    /**
     * Gemma 3's text model: LLaMA's tensor names with zero-centred RMSNorms before and after the attention and
     * the MLP, QK-norm, GeGLU, scaled embeddings, and sliding-window layers interleaved with global ones
     * ({@link Gemma3TextConfig}).
     */
    GEMMA3("Gemma3ForCausalLM", "gemma3_text"),
    /**
     * DeepSeek-V3: multi-latent attention with YaRN, the first layers dense, the others mixtures of experts with a
     * shared expert and a sigmoid router with a score correction bias and group-limited top-k
     * ({@link DeepseekV3Config}).
     */
    DEEPSEEK_V3("DeepseekV3ForCausalLM", "deepseek_v3"),
    /** GPT-2: LayerNorm, tanh GELU, learned positions, Conv1D (transposed) weights, biases everywhere. */
    GPT2("GPT2LMHeadModel", "gpt2");

    private final String className;
    private final String modelType;

    HfArchitecture(String className, String modelType) {
        this.className = className;
        this.modelType = modelType;
    }

    /** @return the class name in {@code architectures}, e.g. {@code "LlamaForCausalLM"} */
    public String className() {
        return className;
    }

    /** @return the {@code model_type} of {@code config.json}, e.g. {@code "llama"} */
    public String modelType() {
        return modelType;
    }

    /** @return whether the layers have LLaMA's structure and tensor names ({@code model.layers.N...}) */
    public boolean isLlamaFamily() {
        return this != GPT2;
    }

    /** @return whether each query and key head has an RMSNorm before RoPE ({@code q_norm}, {@code k_norm}) */
    public boolean hasQkNorm() {
        return this == QWEN3 || this == QWEN3_MOE || this == GEMMA3;
    }

    /**
     * @param className an {@code architectures} entry
     * @param file the config file, for the error
     * @return the architecture
     * @throws HfCheckpointException naming the class and the supported ones
     */
    public static HfArchitecture of(String className, String file) {
        for (HfArchitecture a : values()) {
            if (a.className.equals(className)) {
                return a;
            }
        }
        throw new HfCheckpointException(file + ": architecture \"" + className + "\" is not supported; supported: "
                + Arrays.stream(values()).map(HfArchitecture::className).collect(Collectors.joining(", ")));
    }
}
