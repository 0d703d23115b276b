package io.mcore4j.models;

import ai.djl.ndarray.types.DataType;
import io.mcore4j.contextparallel.CpCommType;
import io.mcore4j.core.fp8.Fp8Config;
import io.mcore4j.moe.MoeConfig;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.tensorparallel.MlpActivation;

import java.util.Collections;
import java.util.EnumSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.stream.Collectors;

/**
 * The shape and numerics of a decoder-only transformer, validated once. {@link #validate(ParallelDims)} checks it
 * against a parallel layout (heads divisible by TP, query groups compatible with TP, layers split
 * across pipeline stages) and names the offending numbers.
 *
 * @param numLayers transformer layers
 * @param hiddenSize model width h
 * @param numAttentionHeads attention heads
 * @param numQueryGroups key/value head groups (GQA); equals heads for multi-head attention
 * @param ffnHiddenSize MLP width
 * @param kvChannels width of one head
 * @param vocabSize vocabulary size (already padded to a multiple of 128 x TP or as the caller wishes)
 * @param maxSequenceLength longest sequence (learned position embeddings' size)
 * @param normalization LayerNorm or RMSNorm
 * @param normEpsilon norm epsilon
 * @param positionEmbedding learned absolute or rotary
 * @param rotaryBase RoPE base (theta)
 * @param rotaryPercent fraction of each head's channels that are rotated
 * @param activation GELU or SwiGLU MLP
 * @param addBiasLinear biases on the linear layers
 * @param tiedEmbeddings output layer shares the word embedding weight
 * @param hiddenDropout dropout after attention and MLP and on embeddings
 * @param attentionDropout dropout on attention probabilities
 * @param initStd standard deviation of normal initialisation
 * @param recompute activation recompute granularity (Megatron's {@code recompute_granularity})
 * @param recomputeMethod with {@link Recompute#FULL}, which layers of each model chunk are recomputed
 *     (Megatron's {@code recompute_method}); null otherwise
 * @param recomputeNumLayers with {@link Recompute#FULL}, the layers of one recomputed group
 *     ({@link RecomputeMethod#UNIFORM}) or the layers recomputed per model chunk
 *     ({@link RecomputeMethod#BLOCK}), at least 1 (Megatron's {@code recompute_num_layers}); 0 otherwise
 * @param recomputeModules with {@link Recompute#SELECTIVE}, the parts of each layer that are recomputed
 *     (Megatron's {@code recompute_modules}); empty otherwise. Held as an unmodifiable set
 * @param sequenceParallel shard norms, dropout and residuals along the sequence over TP
 * @param dtype parameter and compute dtype (Megatron's params_dtype): FLOAT32, FLOAT16 or BFLOAT16
 * @param moe mixture-of-experts settings, or null for dense MLPs
 * @param cpCommType how attention exchanges keys and values across the context-parallel group
 *     (Megatron's {@code cp_comm_type}); unused when the context-parallel size is 1
 * @param hierarchicalContextParallelSizes the levels of the context-parallel group, innermost first
 *     (Megatron's {@code hierarchical_context_parallel_sizes}); {@link CpCommType#A2A_P2P} needs two: the
 *     all-to-all group's size, then the ring's. Empty for none (never null; held unmodifiable)
 * @param addQkvBias biases on the fused QKV projection even without {@code addBiasLinear}
 *     (Megatron's {@code add_qkv_bias}; Qwen2)
 * @param ropeScaling frequency scaling of the rotary embedding (LLaMA 3.1's), or null for none
 * @param qkLayernorm normalise each query and key head over its channels (the layer's norm kind) before
 *     the rotary embedding (Megatron's {@code qk_layernorm}; Qwen3, OLMo 2)
 * @param tpCommOverlap with sequence parallelism, the layers' column- and row-parallel linears overlap
 *     their sequence all-gather and reduce-scatter with their GEMMs, piece by piece (Megatron's
 *     {@code tp_comm_overlap}; the same results); needs {@code sequenceParallel}
 * @param gradientAccumulationFusion on GPUs, the tensor-parallel linears add their weight gradients into
 *     {@code .grad} inside the GEMM (Megatron's {@code gradient_accumulation_fusion}, on by default; the CPU composes
 *     them whatever this says, see tensor-parallel's {@code LocalLinear})
 * @param slidingWindow sliding-window attention of some or all layers (Megatron's {@code window_size} and
 *     {@code window_attn_skip_freq}), or null for causal attention over the whole sequence everywhere
 * @param layernormZeroCenteredGamma every norm's weight is stored centred on zero, starts at 0 and scales by
 *     {@code 1 + weight} (Megatron-Core's {@code layernorm_zero_centered_gamma}, {@code --apply-layernorm-1p};
 *     Gemma's norms); RMSNorm then applies {@code 1 + weight} in float32
 * @param postSelfAttnLayernorm a norm on the attention's output before the residual add (Megatron-Core's
 *     {@code post_self_attn_layernorm}; Gemma 2/3's {@code post_attention_layernorm})
 * @param postMlpLayernorm a norm on the MLP's output before the residual add (Megatron-Core's
 *     {@code post_mlp_layernorm}; Gemma 2/3's {@code post_feedforward_layernorm})
 * @param scaleEmbeddingsBySqrtHidden the word embeddings are multiplied by {@code sqrt(hiddenSize)} rounded to
 *     the parameter dtype (Gemma)
 * @param softmaxScale the attention scores' scale (Megatron-Core's {@code softmax_scale}; Gemma's
 *     {@code query_pre_attn_scalar^-1/2}), or 0 for {@code 1 / sqrt(kvChannels)}
 * @param localRotaryBase the RoPE base of the layers with a sliding window, which then rotate without
 *     {@code ropeScaling} (Gemma 3's {@code rope_local_base_freq}); 0 for {@code rotaryBase} everywhere
 * @param fp8 FP8 GEMMs in the transformer layers' QKV, projection, FC1 and FC2 (Megatron's {@code --fp8-format}
 *     and its flags; the first and last layers as {@link Fp8Config#fp8Layer} says), or null for none; needs
 *     bfloat16 or float16 parameters, as Megatron does
 * @param multiLatentAttention the widths of multi-latent attention, which every layer then uses instead of the
 *     grouped-query self-attention (Megatron-Core's {@code multi_latent_attention}; DeepSeek-V2/V3), or null for
 *     self-attention; {@code kvChannels} and {@code numQueryGroups} are then unused by the attention
 * @param mtp multi-token prediction's depths and loss scale (Megatron-Core's {@code mtp_num_layers} and
 *     {@code mtp_loss_scaling_factor}; DeepSeek-V3), or null for none
 */
public record TransformerConfig(int numLayers, int hiddenSize, int numAttentionHeads, int numQueryGroups,
                                int ffnHiddenSize, int kvChannels, int vocabSize, int maxSequenceLength,
                                Normalization normalization, double normEpsilon,
                                PositionEmbedding positionEmbedding, double rotaryBase, double rotaryPercent,
                                MlpActivation activation, boolean addBiasLinear, boolean tiedEmbeddings,
                                double hiddenDropout, double attentionDropout, double initStd,
                                Recompute recompute, RecomputeMethod recomputeMethod, int recomputeNumLayers,
                                Set<RecomputeModule> recomputeModules, boolean sequenceParallel, DataType dtype, MoeSettings moe,
                                CpCommType cpCommType, List<Integer> hierarchicalContextParallelSizes,
                                boolean addQkvBias, RopeScaling ropeScaling,
                                boolean qkLayernorm, boolean tpCommOverlap, boolean gradientAccumulationFusion,
                                SlidingWindow slidingWindow,
                                boolean layernormZeroCenteredGamma, boolean postSelfAttnLayernorm,
                                boolean postMlpLayernorm, boolean scaleEmbeddingsBySqrtHidden, double softmaxScale,
                                double localRotaryBase, Fp8Config fp8, MlaDims multiLatentAttention,
                                MtpSettings mtp) {

    /** Normalisation layer kind. */
    public enum Normalization { LAYER_NORM, RMS_NORM }

    /** Position encoding. */
    public enum PositionEmbedding { LEARNED_ABSOLUTE, ROPE }

    /**
     * Activation recompute granularity: none, the {@link TransformerConfig#recomputeModules()} of every
     * layer, or whole layers as {@link TransformerConfig#recomputeMethod()} says.
     */
    public enum Recompute { NONE, SELECTIVE, FULL }

    /**
     * Which layers of a model chunk (a pipeline stage, or a virtual stage when interleaving) full
     * recompute checkpoints, Megatron's {@code --recompute-method}.
     */
    public enum RecomputeMethod {
        /**
         * The chunk's layers in consecutive groups of {@code recomputeNumLayers} (the last group may
         * be shorter): each group keeps only its input and is recomputed as a whole in backward.
         */
        UNIFORM,
        /**
         * The chunk's first {@code recomputeNumLayers} layers each keep only their input and are
         * recomputed in backward; the chunk's other layers keep their activations.
         */
        BLOCK;

        /** @return Megatron's name, {@code uniform} or {@code block} */
        public String megatronName() {
            return name().toLowerCase(Locale.ROOT);
        }
    }

    /**
     * A part of a layer that selective recompute recomputes in backward instead of keeping its
     * activations, by Megatron's {@code --recompute-modules} name. Megatron-Core's {@code moe_act},
     * {@code layernorm}, {@code mla_up_proj} and {@code shared_experts} have no counterpart here.
     */
    public enum RecomputeModule {
        /** The core attention (softmax(QK^T)V, its dropout): keeps the rotated queries, keys and values. */
        CORE_ATTN,
        /** A dense layer's MLP (fc1, activation, fc2): keeps its input, the pre-MLP norm's output. */
        MLP,
        /** A mixture-of-experts layer's MLP (router, dispatch, experts, combine): keeps its input. */
        MOE;

        /** @return Megatron's name: {@code core_attn}, {@code mlp} or {@code moe} */
        public String megatronName() {
            return name().toLowerCase(Locale.ROOT);
        }

        /**
         * @param name Megatron's name of a module
         * @return the module
         * @throws IllegalArgumentException naming the value, for Megatron's modules mcore4j does not
         *     implement and for unknown names
         */
        public static RecomputeModule ofMegatronName(String name) {
            for (RecomputeModule m : values()) {
                if (m.megatronName().equals(name)) {
                    return m;
                }
            }
            if (MEGATRON_ONLY.contains(name)) {
                throw new IllegalArgumentException("recompute module " + name + " is Megatron-Core's but not implemented"
                        + " in mcore4j: use core_attn, mlp or moe");
            }
            throw new IllegalArgumentException("unknown recompute module " + name + ": expected core_attn, mlp or moe");
        }

        private static final Set<String> MEGATRON_ONLY = Set.of("moe_act", "layernorm", "mla_up_proj", "shared_experts");
    }

    /**
     * Mixture-of-experts settings: which layers have experts and how every such layer routes and computes. The
     * model's own activation, init std (and output-layer init std), dtype, sequence parallelism and linear biases
     * apply to the experts: {@link TransformerConfig} stores {@code config} with those values set
     * ({@link #forModel}), so {@link #config()} of a built model's settings is exactly the layers' configuration.
     *
     * @param layers which layers are mixtures of experts
     * @param config every such layer's options (experts, router, losses, capacity, dispatcher, shared expert)
     */
    public record MoeSettings(MoeLayerPattern layers, MoeConfig config) {
        /**
         * Checks what Megatron-Core checks of the model's MoE options beyond {@link MoeConfig}'s own rules.
         *
         * @throws IllegalArgumentException naming the values
         */
        public MoeSettings {
            if (layers == null || config == null) {
                throw new IllegalArgumentException("MoE settings need a layer pattern and a MoE config, got " + layers
                        + " and " + config);
            }
            if (config.topK() == 1 && config.routerScore() == MoeConfig.RouterScore.SOFTMAX && !config.preSoftmax()) {
                // Megatron's rule: a softmax over one logit is 1 whatever the logit, so the router would get no gradient
                throw new IllegalArgumentException("top-1 routing with the softmax after the top-k gives the router no"
                        + " gradient: use the softmax before the top-k (preSoftmax, Megatron's --moe-router-pre-softmax)");
            }
        }

        /**
         * Settings with Megatron-Core's defaults apart from those given.
         *
         * @param numExperts experts per MoE layer
         * @param topK experts per token
         * @param layers which layers are mixtures of experts
         * @param ffnHiddenSize expert MLP width
         * @param auxLossCoeff load-balancing loss coefficient
         * @param dispatcher how tokens reach the experts' ranks
         * @return the settings
         */
        public static MoeSettings of(int numExperts, int topK, MoeLayerPattern layers, int ffnHiddenSize,
                                     double auxLossCoeff, MoeConfig.Dispatcher dispatcher) {
            return new MoeSettings(layers, MoeConfig.builder(numExperts, topK, ffnHiddenSize).auxLossCoeff(auxLossCoeff)
                    .dispatcher(dispatcher).build());
        }

        /** These settings with a model's activation, init stds, dtype, sequence parallelism and biases. */
        private MoeSettings forModel(MlpActivation activation, double initStd, double outputInitStd, DataType dtype,
                                     boolean sequenceParallel, boolean addBias) {
            return new MoeSettings(layers, config.toBuilder().activation(activation).initStd(initStd)
                    .outputInitStd(outputInitStd).dtype(dtype).sequenceParallel(sequenceParallel).addBias(addBias)
                    .build());
        }

        /** @return experts per MoE layer */
        public int numExperts() {
            return config.numExperts();
        }

        /** @return experts per token */
        public int topK() {
            return config.topK();
        }

        /** @return expert MLP width */
        public int ffnHiddenSize() {
            return config.ffnHiddenSize();
        }

        /** @return the per-micro-batch load-balancing loss coefficient */
        public double auxLossCoeff() {
            return config.auxLossCoeff();
        }

        /** @return how tokens reach the experts' ranks */
        public MoeConfig.Dispatcher dispatcher() {
            return config.dispatcher();
        }
    }

    /**
     * A frequency scaling of the rotary embedding. {@link Type#LLAMA3}, LLaMA 3.1's ({@code rope_scaling} of type
     * {@code llama3}): with wavelength {@code w = 2 pi / f} of each inverse frequency f, frequencies with
     * {@code w > originalMaxPositions / lowFreqFactor} are divided by {@code factor}, those with
     * {@code w < originalMaxPositions / highFreqFactor} are kept, and those between are interpolated.
     * {@link Type#LINEAR} (type {@code linear}, Megatron's {@code rotary_seq_len_interpolation_factor}): every
     * frequency divided by {@code factor}, the other fields 0. {@link Type#YARN} (type {@code yarn}, Megatron-Core's
     * {@code YarnRotaryEmbedding}, {@code --rope-type yarn}; DeepSeek-V3): frequencies that turn fewer than
     * {@code betaSlow} times over {@code originalMaxPositions} are divided by {@code factor}, those that turn more than
     * {@code betaFast} times are kept, the channels between ramp linearly; cos and sin are multiplied by
     * {@link #attentionFactor()}, and multi-latent attention multiplies its softmax scale by
     * {@code yarnMscale(factor, mscaleAllDim)^2}.
     *
     * @param type the rule
     * @param factor the scale of low frequencies (of all, linearly), above 0 (Megatron's {@code rotary_scaling_factor})
     * @param lowFreqFactor LLaMA 3.1's low-frequency bound's divisor; 0 otherwise
     * @param highFreqFactor LLaMA 3.1's high-frequency bound's divisor, above {@code lowFreqFactor}; 0 otherwise
     * @param originalMaxPositions the context length the model was pre-trained with (LLaMA 3.1, YaRN); 0 for linear
     * @param betaFast YaRN's rotations above which a frequency is kept, above {@code betaSlow} (32); 0 otherwise
     * @param betaSlow YaRN's rotations below which a frequency is scaled, above 0 (1); 0 otherwise
     * @param mscale YaRN's {@code mscale} of the cos/sin factor, not negative (Megatron's {@code --mscale}, 1.0); 0
     *     otherwise
     * @param mscaleAllDim YaRN's {@code mscale_all_dim}, not negative (Megatron's {@code --mscale-all-dim}, 0.0); 0
     *     otherwise
     */
    public record RopeScaling(Type type, double factor, double lowFreqFactor, double highFreqFactor,
                              int originalMaxPositions, double betaFast, double betaSlow, double mscale,
                              double mscaleAllDim) {
        /** The scaling rules. */
        public enum Type { LLAMA3, LINEAR, YARN }

        /** Validates the factors. */
        public RopeScaling {
            if (type == null || !(factor > 0)) {
                throw new IllegalArgumentException("rope scaling " + type + " needs a type and a positive factor, got "
                        + factor);
            }
            if (type == Type.LLAMA3 && (!(lowFreqFactor > 0) || !(highFreqFactor > lowFreqFactor) || originalMaxPositions < 1)) {
                throw new IllegalArgumentException("rope scaling factor " + factor + ", low/high frequency factors "
                        + lowFreqFactor + "/" + highFreqFactor + " and original max positions " + originalMaxPositions
                        + " must be positive with high > low");
            }
            if (type == Type.LINEAR && (lowFreqFactor != 0 || highFreqFactor != 0 || originalMaxPositions != 0)) {
                throw new IllegalArgumentException("linear rope scaling has a factor alone, got low/high frequency factors "
                        + lowFreqFactor + "/" + highFreqFactor + " and original max positions " + originalMaxPositions);
            }
            if (type == Type.YARN && (!(betaSlow > 0) || !(betaFast > betaSlow) || originalMaxPositions < 1
                    || !(mscale >= 0) || !(mscaleAllDim >= 0) || lowFreqFactor != 0 || highFreqFactor != 0)) {
                throw new IllegalArgumentException("yarn rope scaling needs beta fast " + betaFast + " > beta slow " + betaSlow
                        + " > 0, original max positions " + originalMaxPositions + " >= 1, mscale " + mscale
                        + " and mscale all dim " + mscaleAllDim + " >= 0, and no low/high frequency factors");
            }
            if (type != Type.YARN && (betaFast != 0 || betaSlow != 0 || mscale != 0 || mscaleAllDim != 0)) {
                throw new IllegalArgumentException(type + " rope scaling has no beta fast/slow or mscale, got " + betaFast
                        + "/" + betaSlow + ", " + mscale + "/" + mscaleAllDim);
            }
        }

        /**
         * LLaMA 3.1's scaling.
         *
         * @param factor the scale of low frequencies
         * @param lowFreqFactor the low-frequency bound's divisor
         * @param highFreqFactor the high-frequency bound's divisor
         * @param originalMaxPositions the context length the model was pre-trained with
         */
        public RopeScaling(double factor, double lowFreqFactor, double highFreqFactor, int originalMaxPositions) {
            this(Type.LLAMA3, factor, lowFreqFactor, highFreqFactor, originalMaxPositions, 0, 0, 0, 0);
        }

        /**
         * @param factor every frequency's divisor, above 0
         * @return linear scaling
         */
        public static RopeScaling linear(double factor) {
            return new RopeScaling(Type.LINEAR, factor, 0, 0, 0, 0, 0, 0, 0);
        }

        /**
         * YaRN's scaling (Megatron-Core's defaults: beta fast 32, beta slow 1, mscale 1, mscale all dim 0).
         *
         * @param factor the scale of low frequencies
         * @param originalMaxPositions the context length the model was pre-trained with
         * @param betaFast rotations above which a frequency is kept
         * @param betaSlow rotations below which a frequency is divided by {@code factor}
         * @param mscale the cos/sin factor's {@code mscale}
         * @param mscaleAllDim the {@code mscale_all_dim} of the cos/sin factor and of MLA's softmax scale
         * @return the scaling
         */
        public static RopeScaling yarn(double factor, int originalMaxPositions, double betaFast, double betaSlow,
                                       double mscale, double mscaleAllDim) {
            return new RopeScaling(Type.YARN, factor, 0, 0, originalMaxPositions, betaFast, betaSlow, mscale, mscaleAllDim);
        }

        /**
         * @return the factor on cos and sin: YaRN's {@code yarnMscale(factor, mscale) / yarnMscale(factor,
         *     mscaleAllDim)}, 1 for the other rules
         */
        public double attentionFactor() {
            return type == Type.YARN ? yarnMscale(factor, mscale) / yarnMscale(factor, mscaleAllDim) : 1;
        }

        /**
         * @return the factor multi-latent attention's softmax scale gets: YaRN's {@code yarnMscale(factor,
         *     mscaleAllDim)^2} (Megatron-Core's {@code MLASelfAttention}, transformers' {@code yarn_apply_mscale}), 1
         *     for the other rules
         */
        public double softmaxScaleFactor() {
            double m = type == Type.YARN ? yarnMscale(factor, mscaleAllDim) : 1;
            return m * m;
        }

        /**
         * YaRN's {@code get_mscale}: 1 for a scale up to 1, else {@code 0.1 mscale ln(scale) + 1}.
         *
         * @param scale the scaling factor
         * @param mscale the multiplier of its logarithm
         * @return the factor
         */
        public static double yarnMscale(double scale, double mscale) {
            return scale <= 1 ? 1 : 0.1 * mscale * Math.log(scale) + 1;
        }
    }

    /**
     * The widths of multi-latent attention (Megatron-Core's {@code MLATransformerConfig}: {@code --q-lora-rank},
     * {@code --kv-lora-rank}, {@code --qk-head-dim}, {@code --qk-pos-emb-head-dim}, {@code --v-head-dim}).
     *
     * @param qLoraRank width of the queries' latent, or 0 for queries projected from the hidden states directly
     *     (Megatron's {@code q_lora_rank} None; DeepSeek-V3: 1536)
     * @param kvLoraRank width of the keys' and values' latent, at least 1 (512)
     * @param qkHeadDim channels per query and key head that do not rotate, at least 1 (128)
     * @param qkPosEmbHeadDim channels per query and key head that rotate, even, at least 2 (64)
     * @param vHeadDim channels per value head, at least 1 and at most {@code qkHeadDim + qkPosEmbHeadDim} (128)
     */
    public record MlaDims(int qLoraRank, int kvLoraRank, int qkHeadDim, int qkPosEmbHeadDim, int vHeadDim) {
        /**
         * Checks the widths.
         *
         * @throws IllegalArgumentException naming the value and what was expected
         */
        public MlaDims {
            if (qLoraRank < 0 || kvLoraRank < 1 || qkHeadDim < 1 || vHeadDim < 1) {
                throw new IllegalArgumentException("MLA widths must be at least 1 (q_lora_rank at least 0): q_lora_rank "
                        + qLoraRank + ", kv_lora_rank " + kvLoraRank + ", qk_head_dim " + qkHeadDim + ", v_head_dim "
                        + vHeadDim);
            }
            if (qkPosEmbHeadDim < 2 || qkPosEmbHeadDim % 2 != 0) {
                throw new IllegalArgumentException("qk_pos_emb_head_dim " + qkPosEmbHeadDim + " must be even and at least 2"
                        + " (RoPE rotates pairs of channels)");
            }
            if (vHeadDim > qkHeadDim + qkPosEmbHeadDim) {
                throw new IllegalArgumentException("v_head_dim " + vHeadDim + " must be at most qk_head_dim + "
                        + "qk_pos_emb_head_dim = " + (qkHeadDim + qkPosEmbHeadDim) + " (values are padded to the query width)");
            }
        }

        /** @return channels per query and key head, {@code qkHeadDim + qkPosEmbHeadDim} */
        public int queryKeyWidth() {
            return qkHeadDim + qkPosEmbHeadDim;
        }

        /** @return whether the queries go through a latent ({@code qLoraRank > 0}) */
        public boolean compressesQueries() {
            return qLoraRank > 0;
        }
    }

    /**
     * Multi-token prediction (DeepSeek-V3 §2.2, Megatron-Core's {@code MultiTokenPredictionBlock}): after the
     * main model's final norm, depth {@code k = 1..numLayers} normalises the previous depth's hidden states and
     * the embedding of the tokens shifted {@code k} ahead, projects their concatenation back to the hidden size,
     * runs one transformer layer and its own final norm, and the shared output layer predicts the token
     * {@code k + 1} ahead. The depths' mean loss times {@code lossScalingFactor} is added to the main loss's
     * gradient (not to the reported loss). Training only: logits and generation ignore the depths.
     *
     * @param numLayers prediction depths, at least 1 ({@code --mtp-num-layers})
     * @param lossScalingFactor the weight of the depths' mean loss, finite and not negative
     *     ({@code --mtp-loss-scaling-factor}, Megatron's default 0.1)
     */
    public record MtpSettings(int numLayers, double lossScalingFactor) {
        /** Megatron's default {@code --mtp-loss-scaling-factor}. */
        public static final double DEFAULT_LOSS_SCALING_FACTOR = 0.1;

        /**
         * Checks the values.
         *
         * @throws IllegalArgumentException naming the value
         */
        public MtpSettings {
            if (numLayers < 1) {
                throw new IllegalArgumentException("--mtp-num-layers " + numLayers + " must be at least 1");
            }
            if (!(lossScalingFactor >= 0) || Double.isInfinite(lossScalingFactor)) {
                throw new IllegalArgumentException("--mtp-loss-scaling-factor " + lossScalingFactor
                        + " must be finite and not negative");
            }
        }
    }

    /**
     * Sliding-window attention, Megatron-Core's {@code window_size} with {@code window_attn_skip_freq}: in a
     * windowed layer the query at position {@code p} attends the keys at positions {@code p - size .. p} (causal,
     * limited to the {@code size} tokens before it), in the other layers every position up to {@code p}.
     * Megatron's {@code window_size} is the pair {@code (size, 0)} of flash-attention's left and right bounds; a
     * Hugging Face {@code sliding_window} of {@code W} (keys with {@code p - k < W}) is {@code size = W - 1}.
     *
     * @param size tokens before a query that it still attends, at least 0
     * @param skipFreq every {@code skipFreq}-th layer (layers {@code skipFreq - 1, 2 skipFreq - 1, ...} counted from
     *     0, Megatron's 1-based {@code layer_number % skipFreq == 0}) attends the whole sequence; 0 for none
     *     (every layer windowed, or as {@code windowedLayers} says)
     * @param windowedLayers Megatron's list form of {@code window_attn_skip_freq}: per layer, true where it is
     *     windowed; empty when {@code skipFreq} decides. Held as an unmodifiable list
     */
    public record SlidingWindow(int size, int skipFreq, List<Boolean> windowedLayers) {
        /** Validates the numbers; a pattern's length is checked against the model's layers by the config. */
        public SlidingWindow {
            if (size < 0 || skipFreq < 0) {
                throw new IllegalArgumentException("window size " + size + " and window skip frequency " + skipFreq
                        + " must not be negative");
            }
            windowedLayers = windowedLayers == null ? List.of() : List.copyOf(windowedLayers);
            if (skipFreq > 0 && !windowedLayers.isEmpty()) {
                throw new IllegalArgumentException("a window skip frequency (" + skipFreq + ") and a per-layer pattern "
                        + windowedLayers + " exclude each other");
            }
        }

        /**
         * @param size tokens before a query that it still attends
         * @return a window on every layer
         */
        public static SlidingWindow everyLayer(int size) {
            return new SlidingWindow(size, 0, List.of());
        }

        /**
         * @param layerNumber a global layer index, from 0
         * @return whether that layer attends through the window
         */
        public boolean appliesTo(int layerNumber) {
            if (!windowedLayers.isEmpty()) {
                return windowedLayers.get(layerNumber);
            }
            return skipFreq == 0 || (layerNumber + 1) % skipFreq != 0;
        }
    }

    /** Validates everything that does not depend on the parallel layout. */
    public TransformerConfig {
        positive("number of layers", numLayers);
        positive("hidden size", hiddenSize);
        positive("number of attention heads", numAttentionHeads);
        positive("number of query groups", numQueryGroups);
        positive("ffn hidden size", ffnHiddenSize);
        positive("kv channels", kvChannels);
        positive("vocab size", vocabSize);
        positive("max sequence length", maxSequenceLength);
        if (numAttentionHeads % numQueryGroups != 0) {
            throw new IllegalArgumentException(numQueryGroups + " query groups do not divide "
                    + numAttentionHeads + " attention heads");
        }
        if (!(hiddenDropout >= 0 && hiddenDropout < 1) || !(attentionDropout >= 0 && attentionDropout < 1)) {
            throw new IllegalArgumentException("dropout probabilities " + hiddenDropout + " and " + attentionDropout
                    + " must be in [0, 1)");
        }
        if (!(rotaryPercent > 0 && rotaryPercent <= 1)) {
            throw new IllegalArgumentException("rotary percent " + rotaryPercent + " must be in (0, 1]");
        }
        if (positionEmbedding == PositionEmbedding.ROPE && ((int) Math.round(kvChannels * rotaryPercent)) % 2 != 0) {
            throw new IllegalArgumentException("rotary dims " + kvChannels + " x " + rotaryPercent + " must be even");
        }
        if (dtype != DataType.FLOAT32 && dtype != DataType.FLOAT16 && dtype != DataType.BFLOAT16) {
            throw new IllegalArgumentException("dtype " + dtype + " is not supported: use float32, float16 or bfloat16");
        }
        if (ropeScaling != null && positionEmbedding != PositionEmbedding.ROPE) {
            throw new IllegalArgumentException("rope scaling needs rotary position embeddings, got " + positionEmbedding);
        }
        if (!(initStd > 0)) {
            throw new IllegalArgumentException("init std " + initStd + " must be positive");
        }
        if (cpCommType == null) {
            throw new IllegalArgumentException("the context-parallel communication type must be given (ALL_GATHER or P2P)");
        }
        hierarchicalContextParallelSizes = hierarchicalContextParallelSizes == null ? List.of()
                : List.copyOf(hierarchicalContextParallelSizes);
        for (int size : hierarchicalContextParallelSizes) {
            if (size < 1) {
                throw new IllegalArgumentException(hierarchyFlag(hierarchicalContextParallelSizes)
                        + ": every size must be at least 1");
            }
        }
        if (cpCommType == CpCommType.A2A_P2P && hierarchicalContextParallelSizes.size() != 2) {
            // Megatron asserts the same: the all-to-all's group is the first level, the ring's the second
            throw new IllegalArgumentException("--cp-comm-type a2a+p2p needs two --hierarchical-context-parallel-sizes"
                    + " (the a2a group's size, then the p2p ring's, multiplying to --context-parallel-size); got "
                    + (hierarchicalContextParallelSizes.isEmpty() ? "none" : hierarchyFlag(hierarchicalContextParallelSizes)));
        }
        if (recompute == null) {
            throw new IllegalArgumentException("the recompute granularity must be given (NONE, SELECTIVE or FULL)");
        }
        recomputeModules = recomputeModules == null || recomputeModules.isEmpty() ? Set.of()
                : Collections.unmodifiableSet(EnumSet.copyOf(recomputeModules));
        if (recompute == Recompute.FULL) {
            if (recomputeMethod == null) {
                throw new IllegalArgumentException("full recompute needs a recompute method (uniform or block)");
            }
            if (recomputeNumLayers < 1) {
                throw new IllegalArgumentException("recompute num layers " + recomputeNumLayers
                        + " must be at least 1 with full recompute");
            }
        } else if (recomputeMethod != null || recomputeNumLayers != 0) {
            throw new IllegalArgumentException("recompute method " + recomputeMethod + " and recompute num layers "
                    + recomputeNumLayers + " apply only to full recompute, not " + recompute);
        }
        if (recompute != Recompute.SELECTIVE && !recomputeModules.isEmpty()) {
            throw new IllegalArgumentException("recompute modules " + recomputeModules
                    + " apply only to selective recompute, not " + recompute);
        }
        if (fp8 != null) {
            if (dtype != DataType.BFLOAT16 && dtype != DataType.FLOAT16) {
                throw new IllegalArgumentException("FP8 (" + fp8.format().megatronName() + ") needs bfloat16 or float16 parameters, not "
                        + dtype + " (Megatron's rule: --fp8-format with --bf16 or --fp16)");
            }
            fp8.checkLayers(numLayers);
            if (multiLatentAttention != null) {
                throw new IllegalArgumentException("FP8 (" + fp8.format().megatronName() + ") runs the QKV, projection,"
                        + " FC1 and FC2 GEMMs of grouped-query attention layers; multi-latent attention's linears have no"
                        + " FP8 path yet (drop --fp8-format or --multi-latent-attention)");
            }
        }
        if (tpCommOverlap && !sequenceParallel) {
            // Megatron asserts the same: the overlap splits the sequence-parallel collectives
            throw new IllegalArgumentException("tensor-parallel communication overlap (tp_comm_overlap) needs sequence"
                    + " parallelism, which is off");
        }
        if (!(softmaxScale >= 0) || Double.isInfinite(softmaxScale)) {
            throw new IllegalArgumentException("softmax scale " + softmaxScale + " must be finite and not negative (0: 1 /"
                    + " sqrt(kv channels))");
        }
        if (!(localRotaryBase >= 0)) {
            throw new IllegalArgumentException("local rotary base " + localRotaryBase + " must not be negative (0: none)");
        }
        if (localRotaryBase > 0 && (positionEmbedding != PositionEmbedding.ROPE || slidingWindow == null)) {
            throw new IllegalArgumentException("a local rotary base (" + localRotaryBase + ") is the RoPE base of the"
                    + " sliding-window layers: it needs rotary embeddings and a sliding window");
        }
        if (slidingWindow != null && !slidingWindow.windowedLayers().isEmpty()
                && slidingWindow.windowedLayers().size() != numLayers) {
            throw new IllegalArgumentException("the window pattern " + slidingWindow.windowedLayers() + " has "
                    + slidingWindow.windowedLayers().size() + " entries for " + numLayers + " layers");
        }
        if (multiLatentAttention != null && (positionEmbedding != PositionEmbedding.ROPE || rotaryPercent != 1
                || qkLayernorm || slidingWindow != null || addQkvBias || softmaxScale != 0)) {
            throw new IllegalArgumentException("multi-latent attention rotates its own qk_pos_emb_head_dim channels of every"
                    + " head with RoPE, without rotary percent, QK layernorm, sliding windows, QKV biases or a softmax scale"
                    + " of its own; got " + positionEmbedding + ", rotary percent " + rotaryPercent + ", qk layernorm "
                    + qkLayernorm + ", window " + slidingWindow + ", qkv bias " + addQkvBias + ", softmax scale "
                    + softmaxScale);
        }
        if (ropeScaling != null && ropeScaling.type() == RopeScaling.Type.YARN && multiLatentAttention == null) {
            throw new IllegalArgumentException("yarn rope scaling is implemented for multi-latent attention only");
        }
        if (moe != null) {
            moe.layers().check(numLayers);
            moe = moe.forModel(activation, initStd, outputInitStd(initStd, numLayers), dtype, sequenceParallel,
                    addBiasLinear);
        }
    }

    /** @return the init std of the layers' output projections (attention and MLP fc2), {@code initStd / sqrt(2 L)} */
    public double outputInitStd() {
        return outputInitStd(initStd, numLayers);
    }

    private static double outputInitStd(double initStd, int numLayers) {
        return initStd / Math.sqrt(2.0 * numLayers);
    }

    /**
     * Checks the model against a layout, including how its layers split over pipeline stages.
     *
     * @param dims the parallel layout
     * @param layersPerVirtualStage layers per virtual stage when interleaving (0 = not interleaved)
     * @throws IllegalArgumentException naming the numbers
     */
    public void validate(ParallelDims dims, int layersPerVirtualStage) {
        validate(dims);
        int pp = dims.pipelineParallel();
        int vp = dims.virtualPipelineParallel();
        if (numLayers % (pp * vp) != 0) {
            throw new IllegalArgumentException(numLayers + " layers do not split evenly over " + pp
                    + " pipeline stages x " + vp + " virtual stages");
        }
        if (layersPerVirtualStage > 0 && layersPerVirtualStage * pp * vp != numLayers) {
            throw new IllegalArgumentException(layersPerVirtualStage + " layers per virtual stage x " + pp + " stages x "
                    + vp + " virtual stages != " + numLayers + " layers");
        }
        int perChunk = numLayers / (pp * vp);
        if (recompute == Recompute.FULL && recomputeNumLayers > perChunk) {
            throw new IllegalArgumentException("recompute num layers " + recomputeNumLayers + " must be between 1 and the "
                    + perChunk + " layers of a pipeline stage" + (vp > 1 ? " (virtual stage)" : ""));
        }
    }

    /**
     * Checks the widths against the tensor- and expert-parallel sizes of a layout (what every
     * model chunk needs; {@code GptModel.build} calls it). How layers split over pipeline stages is
     * the caller's choice and checked by {@link #validate(ParallelDims, int)}.
     *
     * @param dims the parallel layout
     * @throws IllegalArgumentException naming the numbers
     */
    public void validate(ParallelDims dims) {
        int tp = dims.tensorParallel();
        if (numAttentionHeads % tp != 0) {
            throw new IllegalArgumentException(numAttentionHeads + " attention heads are not divisible by tensor parallel size " + tp);
        }
        if (numQueryGroups % tp != 0) {
            throw new IllegalArgumentException(numQueryGroups + " query groups are not divisible by tensor parallel size " + tp);
        }
        if (ffnHiddenSize % tp != 0) {
            throw new IllegalArgumentException("ffn hidden size " + ffnHiddenSize + " is not divisible by tensor parallel size " + tp);
        }
        if (vocabSize % tp != 0) {
            throw new IllegalArgumentException("vocab size " + vocabSize + " is not divisible by tensor parallel size " + tp);
        }
        if (sequenceParallel && tp == 1) {
            throw new IllegalArgumentException("sequence parallelism needs tensor parallel size > 1, got 1");
        }
        if (multiLatentAttention != null && (multiLatentAttention.qLoraRank() % tp != 0
                || (multiLatentAttention.kvLoraRank() + multiLatentAttention.qkPosEmbHeadDim()) % tp != 0)) {
            // the down-projections are column-parallel with gathered outputs: their widths split over TP
            throw new IllegalArgumentException("multi-latent attention's q_lora_rank " + multiLatentAttention.qLoraRank()
                    + " and kv_lora_rank + qk_pos_emb_head_dim " + (multiLatentAttention.kvLoraRank()
                    + multiLatentAttention.qkPosEmbHeadDim()) + " must be divisible by tensor parallel size " + tp);
        }
        if (moe != null && moe.numExperts() % dims.expertParallel() != 0) {
            throw new IllegalArgumentException(moe.numExperts() + " experts are not divisible by expert parallel size "
                    + dims.expertParallel());
        }
        if (moe != null && moe.config().sharedExpertFfnHiddenSize() % tp != 0) {
            throw new IllegalArgumentException("shared expert ffn hidden size " + moe.config().sharedExpertFfnHiddenSize()
                    + " is not divisible by tensor parallel size " + tp);
        }
        if (moe != null && moe.ffnHiddenSize() % dims.expertTensorParallel() != 0) {
            throw new IllegalArgumentException("expert ffn hidden size " + moe.ffnHiddenSize()
                    + " is not divisible by expert tensor parallel size " + dims.expertTensorParallel());
        }
        validateContextParallel(tp, dims.contextParallel());
        validateMtpLayout(dims.pipelineParallel(), dims.contextParallel());
        if (cpCommType == CpCommType.A2A_P2P
                && !dims.hierarchicalContextParallelSizes().equals(hierarchicalContextParallelSizes)) {
            throw new IllegalArgumentException("--cp-comm-type a2a+p2p with " + hierarchyFlag(hierarchicalContextParallelSizes)
                    + " needs the layout's hierarchical context-parallel groups of those sizes; the layout has "
                    + dims.hierarchicalContextParallelSizes() + " (ParallelDims.Builder.hierarchicalContextParallelSizes)");
        }
    }

    /**
     * Checks that multi-token prediction, if set, fits the layout: one pipeline stage (the depths read the word
     * embedding, which sits on the first), no context parallelism (the depths shift tokens along the whole sequence).
     *
     * @param pipelineParallel the pipeline-parallel size
     * @param contextParallel the context-parallel size
     * @throws IllegalArgumentException naming the flags and their values
     */
    public void validateMtpLayout(int pipelineParallel, int contextParallel) {
        if (mtp != null && (pipelineParallel > 1 || contextParallel > 1)) {
            throw new IllegalArgumentException("--mtp-num-layers " + mtp.numLayers() + " runs on one pipeline stage"
                    + " without context parallelism; got --pipeline-model-parallel-size " + pipelineParallel
                    + ", --context-parallel-size " + contextParallel);
        }
    }

    /**
     * Checks the hierarchical context-parallel sizes against the tensor- and context-parallel sizes:
     * they multiply to the context-parallel size, and under {@link CpCommType#A2A_P2P} the query heads of
     * a tensor-parallel rank are divisible by the all-to-all group's size (the first level), as
     * Megatron-LM's argument checks demand.
     *
     * @param tensorParallel the tensor-parallel size
     * @param contextParallel the context-parallel size
     * @throws IllegalArgumentException naming the flags and their values
     */
    public void validateContextParallel(int tensorParallel, int contextParallel) {
        if (hierarchicalContextParallelSizes.isEmpty()) {
            return;
        }
        long product = 1;
        for (int size : hierarchicalContextParallelSizes) {
            product *= size;
        }
        if (product != contextParallel) {
            throw new IllegalArgumentException(hierarchyFlag(hierarchicalContextParallelSizes) + " multiply to " + product
                    + ", not --context-parallel-size " + contextParallel);
        }
        int a2a = hierarchicalContextParallelSizes.get(0);
        int heads = numAttentionHeads / tensorParallel;
        if (cpCommType == CpCommType.A2A_P2P && heads % a2a != 0) {
            throw new IllegalArgumentException("--cp-comm-type a2a+p2p scatters the attention heads over the a2a group: "
                    + heads + " heads per tensor-parallel rank (" + numAttentionHeads + " / --tensor-model-parallel-size "
                    + tensorParallel + ") are not divisible by its size " + a2a + " (the first of "
                    + hierarchyFlag(hierarchicalContextParallelSizes) + ")");
        }
    }

    private static String hierarchyFlag(List<Integer> sizes) {
        return "--hierarchical-context-parallel-sizes " + sizes.stream().map(String::valueOf).collect(Collectors.joining(" "));
    }

    /**
     * Whether global layer {@code layerNumber} has a mixture of experts instead of a dense MLP
     * ({@link MoeSettings#layers()}).
     *
     * @param layerNumber a global layer index
     * @return true for MoE layers
     */
    public boolean isMoeLayer(int layerNumber) {
        return moe != null && moe.layers().isMoe(layerNumber);
    }

    /**
     * @param layerNumber a global layer index
     * @return the tokens before a query that it attends in that layer ({@link SlidingWindow#size()}), or -1
     *     where the layer attends every earlier token
     */
    public int windowSize(int layerNumber) {
        return slidingWindow != null && slidingWindow.appliesTo(layerNumber) ? slidingWindow.size() : -1;
    }

    /**
     * @param layerNumber a global layer index
     * @return the RoPE base of that layer: {@link #localRotaryBase()} where it is set and the layer has a window,
     *     else {@link #rotaryBase()}
     */
    public double rotaryBase(int layerNumber) {
        return localRotaryBase > 0 && windowSize(layerNumber) >= 0 ? localRotaryBase : rotaryBase;
    }

    /**
     * @param layerNumber a global layer index
     * @return the rotary frequency scaling of that layer: none on layers with a {@link #localRotaryBase()}
     */
    public RopeScaling ropeScaling(int layerNumber) {
        return localRotaryBase > 0 && windowSize(layerNumber) >= 0 ? null : ropeScaling;
    }

    /**
     * @param vocab another vocabulary size (for example padded for another tensor-parallel size)
     * @return this config with that vocabulary, everything else equal
     */
    public TransformerConfig withVocabSize(int vocab) {
        return toBuilder().vocabSize(vocab).build();
    }

    /**
     * @param module a part of a layer
     * @return whether selective recompute recomputes it
     */
    public boolean recomputes(RecomputeModule module) {
        return recompute == Recompute.SELECTIVE && recomputeModules.contains(module);
    }

    /** @return whether rotary position embeddings are used */
    public boolean usesRope() {
        return positionEmbedding == PositionEmbedding.ROPE;
    }

    /**
     * Training FLOPs per token (forward + backward), Megatron-LM's accounting ({@code num_floating_point_operations}):
     * 6 per weight element a token meets in the attention projections ({@code h (q + 2 kv) + q h} per layer, with
     * {@code q} the query width and {@code kv} the key and value widths), in the MLPs and in the logits
     * ({@code 6 h V}), plus {@code 12 q s} per layer for the attention scores and their product with the values.
     * An MLP counts {@code 2} weights of width {@code ffn} per hidden unit (3 with SwiGLU): a dense layer's
     * {@code ffn}, a mixture-of-experts layer's top-k routed experts of {@code ffn_moe} each plus its shared
     * expert; never its other experts, nor the router. For a GPT with a {@code 4h} GELU MLP and as many key/value
     * heads as heads this is {@code 72 L h^2 + 12 L h s + 6 h V}. Multi-latent attention counts, as Megatron-LM does,
     * its projections and latent norms ({@code r_q (h + n w + 1) + r_kv (h + n (d_k + d_v) + 1) + h d_r + n d_v h}, or
     * {@code h n w} for the queries without a latent, with {@code n} heads of {@code w = d_k + d_r} query/key channels)
     * and {@code 6 s n (w + d_v)} for the scores and their product with the values. Each multi-token prediction depth
     * counts, as Megatron-LM does, one layer of the decoder's last layer's kind, {@code 6 (3 h + 2 h^2)} for its norms
     * and projection, and {@code 6 h V} for its logits.
     *
     * @param seqLength tokens per sequence
     * @return FLOPs per token
     */
    public double flopsPerToken(int seqLength) {
        double h = hiddenSize;
        double query = (double) kvChannels * numAttentionHeads;
        double keyValue = (double) kvChannels * numQueryGroups;
        double attention = 6 * (h * (query + 2 * keyValue) + query * h) + 12 * query * seqLength;
        if (multiLatentAttention != null) {
            MlaDims d = multiLatentAttention;
            double n = numAttentionHeads;
            double queries = d.compressesQueries() ? d.qLoraRank() * (h + n * d.queryKeyWidth() + 1) : h * n * d.queryKeyWidth();
            double keysValues = d.kvLoraRank() * (h + n * (d.qkHeadDim() + d.vHeadDim()) + 1) + h * d.qkPosEmbHeadDim();
            attention = 6 * (queries + keysValues + n * d.vHeadDim() * h)
                    + 6.0 * seqLength * n * (d.queryKeyWidth() + d.vHeadDim());
        }
        double widths = activation.fc1Factor() + 1; // fc1 (fused [gate; up] for SwiGLU) and fc2
        int depths = mtp == null ? 0 : mtp.numLayers();
        int moeLayers = moe == null ? 0 : moe.layers().count(numLayers);
        int denseLayers = numLayers - moeLayers;
        // Megatron counts each depth's layer as one of the decoder's last layer's kind
        if (isMoeLayer(numLayers - 1)) {
            moeLayers += depths;
        } else {
            denseLayers += depths;
        }
        double mlpWidth = (double) ffnHiddenSize * denseLayers;
        if (moe != null) {
            mlpWidth += ((double) moe.ffnHiddenSize() * moe.topK() + moe.config().sharedExpertFfnHiddenSize()) * moeLayers;
        }
        // each depth's two norms of its inputs and final norm (3 h), its projection (2 h^2) and its logits
        return (numLayers + depths) * attention + 6 * h * widths * mlpWidth + 6.0 * depths * (3 * h + 2 * h * h)
                + 6 * h * vocabSize * (depths + 1);
    }

    /**
     * A builder with GPT-2-like defaults.
     *
     * @param numLayers layers
     * @param hiddenSize width
     * @param numAttentionHeads heads
     * @param vocabSize vocabulary
     * @return the builder
     */
    public static Builder builder(int numLayers, int hiddenSize, int numAttentionHeads, int vocabSize) {
        return new Builder(numLayers, hiddenSize, numAttentionHeads, vocabSize);
    }

    /** @return a builder holding this config's values */
    public Builder toBuilder() {
        Builder b = new Builder(numLayers, hiddenSize, numAttentionHeads, vocabSize);
        b.queryGroups = numQueryGroups;
        b.ffn = ffnHiddenSize;
        b.kv = kvChannels;
        b.maxSeq = maxSequenceLength;
        b.norm = normalization;
        b.eps = normEpsilon;
        b.position = positionEmbedding;
        b.ropeBase = rotaryBase;
        b.ropePercent = rotaryPercent;
        b.act = activation;
        b.bias = addBiasLinear;
        b.tied = tiedEmbeddings;
        b.hiddenDrop = hiddenDropout;
        b.attnDrop = attentionDropout;
        b.std = initStd;
        b.recomputeMode = recompute;
        b.method = recomputeMethod;
        b.methodLayers = recomputeNumLayers;
        b.modules = recomputeModules;
        b.sp = sequenceParallel;
        b.type = dtype;
        b.moeSettings = moe;
        b.cpComm = cpCommType;
        b.hierarchicalCp = hierarchicalContextParallelSizes;
        b.qkvBias = addQkvBias;
        b.scaling = ropeScaling;
        b.qkNorm = qkLayernorm;
        b.tpOverlap = tpCommOverlap;
        b.accumulationFusion = gradientAccumulationFusion;
        b.window = slidingWindow;
        b.zeroCentered = layernormZeroCenteredGamma;
        b.postAttnNorm = postSelfAttnLayernorm;
        b.postMlpNorm = postMlpLayernorm;
        b.scaleEmbeddings = scaleEmbeddingsBySqrtHidden;
        b.scoreScale = softmaxScale;
        b.localRope = localRotaryBase;
        b.fp8Config = fp8;
        b.mla = multiLatentAttention;
        b.mtpSettings = mtp;
        return b;
    }

    private static void positive(String what, int value) {
        if (value < 1) {
            throw new IllegalArgumentException(what + " must be positive, got " + value);
        }
    }

    /** Builder for {@link TransformerConfig}. */
    public static final class Builder {
        private final int layers;
        private final int hidden;
        private final int heads;
        private int vocab;
        private int queryGroups = -1;
        private int ffn = -1;
        private int kv = -1;
        private int maxSeq = 1024;
        private Normalization norm = Normalization.LAYER_NORM;
        private double eps = 1e-5;
        private PositionEmbedding position = PositionEmbedding.LEARNED_ABSOLUTE;
        private double ropeBase = 10000;
        private double ropePercent = 1.0;
        private MlpActivation act = MlpActivation.GELU;
        private boolean bias = true;
        private boolean tied = true;
        private double hiddenDrop = 0.1;
        private double attnDrop = 0.1;
        private double std = 0.02;
        private Recompute recomputeMode = Recompute.NONE;
        private RecomputeMethod method;
        private int methodLayers;
        private Set<RecomputeModule> modules = Set.of();
        private boolean sp;
        private DataType type = DataType.FLOAT32;
        private MoeSettings moeSettings;
        private CpCommType cpComm = CpCommType.P2P;
        private List<Integer> hierarchicalCp = List.of();
        private boolean qkvBias;
        private RopeScaling scaling;
        private boolean qkNorm;
        private boolean tpOverlap;
        private boolean accumulationFusion = true;
        private SlidingWindow window;
        private boolean zeroCentered;
        private boolean postAttnNorm;
        private boolean postMlpNorm;
        private boolean scaleEmbeddings;
        private double scoreScale;
        private double localRope;
        private Fp8Config fp8Config;
        private MlaDims mla;
        private MtpSettings mtpSettings;

        private Builder(int layers, int hidden, int heads, int vocab) {
            this.layers = layers;
            this.hidden = hidden;
            this.heads = heads;
            this.vocab = vocab;
        }

        /** @param size vocabulary size @return this */
        public Builder vocabSize(int size) {
            this.vocab = size;
            return this;
        }

        /** @param groups query groups (GQA) @return this */
        public Builder queryGroups(int groups) {
            this.queryGroups = groups;
            return this;
        }

        /** @param size MLP width (default 4h) @return this */
        public Builder ffnHiddenSize(int size) {
            this.ffn = size;
            return this;
        }

        /** @param channels head width (default h / heads) @return this */
        public Builder kvChannels(int channels) {
            this.kv = channels;
            return this;
        }

        /** @param length max sequence length @return this */
        public Builder maxSequenceLength(int length) {
            this.maxSeq = length;
            return this;
        }

        /** @param kind norm kind @param epsilon its epsilon @return this */
        public Builder normalization(Normalization kind, double epsilon) {
            this.norm = kind;
            this.eps = epsilon;
            return this;
        }

        /** @param kind position embedding @return this */
        public Builder positionEmbedding(PositionEmbedding kind) {
            this.position = kind;
            return this;
        }

        /** @param base RoPE base @param percent rotated fraction @return this */
        public Builder rotary(double base, double percent) {
            this.ropeBase = base;
            this.ropePercent = percent;
            return this;
        }

        /** @param activation MLP activation @return this */
        public Builder activation(MlpActivation activation) {
            this.act = activation;
            return this;
        }

        /** @param enabled biases on linears @return this */
        public Builder addBiasLinear(boolean enabled) {
            this.bias = enabled;
            return this;
        }

        /** @param enabled tie output layer to the word embeddings @return this */
        public Builder tiedEmbeddings(boolean enabled) {
            this.tied = enabled;
            return this;
        }

        /** @param hidden hidden dropout @param attention attention dropout @return this */
        public Builder dropout(double hidden, double attention) {
            this.hiddenDrop = hidden;
            this.attnDrop = attention;
            return this;
        }

        /** @param value init std @return this */
        public Builder initStd(double value) {
            this.std = value;
            return this;
        }

        /**
         * Sets the granularity with its usual detail: {@link Recompute#FULL} recomputes every layer
         * on its own ({@link RecomputeMethod#UNIFORM} groups of 1), {@link Recompute#SELECTIVE} the
         * core attention (Megatron's default module); {@link #recomputeFull} and
         * {@link #recomputeSelective} choose otherwise.
         *
         * @param mode recompute granularity
         * @return this
         */
        public Builder recompute(Recompute mode) {
            this.recomputeMode = mode;
            this.method = mode == Recompute.FULL ? RecomputeMethod.UNIFORM : null;
            this.methodLayers = mode == Recompute.FULL ? 1 : 0;
            this.modules = mode == Recompute.SELECTIVE ? Set.of(RecomputeModule.CORE_ATTN) : Set.of();
            return this;
        }

        /**
         * Full recompute (Megatron's {@code --recompute-granularity full}).
         *
         * @param recomputeMethod which layers of each model chunk are recomputed
         * @param numLayers layers per recomputed group (uniform) or recomputed per chunk (block), at least 1
         * @return this
         */
        public Builder recomputeFull(RecomputeMethod recomputeMethod, int numLayers) {
            this.recomputeMode = Recompute.FULL;
            this.method = recomputeMethod;
            this.methodLayers = numLayers;
            this.modules = Set.of();
            return this;
        }

        /**
         * Selective recompute (Megatron's {@code --recompute-granularity selective}).
         *
         * @param recomputed the parts of each layer recomputed in backward (empty: none)
         * @return this
         */
        public Builder recomputeSelective(Set<RecomputeModule> recomputed) {
            this.recomputeMode = Recompute.SELECTIVE;
            this.method = null;
            this.methodLayers = 0;
            this.modules = Set.copyOf(recomputed);
            return this;
        }

        /** @param enabled sequence parallelism @return this */
        public Builder sequenceParallel(boolean enabled) {
            this.sp = enabled;
            return this;
        }

        /** @param dtype parameter dtype @return this */
        public Builder dtype(DataType dtype) {
            this.type = dtype;
            return this;
        }

        /** @param settings MoE settings, or null @return this */
        public Builder moe(MoeSettings settings) {
            this.moeSettings = settings;
            return this;
        }

        /**
         * @param type how attention exchanges keys and values across the context-parallel group
         *     (default {@link CpCommType#P2P}, Megatron's default)
         * @return this
         */
        public Builder cpCommType(CpCommType type) {
            this.cpComm = type;
            return this;
        }

        /**
         * @param sizes the context-parallel group's levels, innermost first (Megatron's
         *     {@code --hierarchical-context-parallel-sizes}; {@link CpCommType#A2A_P2P} needs two: the
         *     all-to-all group's size, then the ring's); empty for none
         * @return this
         */
        public Builder hierarchicalContextParallelSizes(List<Integer> sizes) {
            this.hierarchicalCp = sizes;
            return this;
        }

        /** @param enabled biases on the QKV projection whatever {@link #addBiasLinear} says @return this */
        public Builder addQkvBias(boolean enabled) {
            this.qkvBias = enabled;
            return this;
        }

        /** @param value rotary frequency scaling, or null for none @return this */
        public Builder ropeScaling(RopeScaling value) {
            this.scaling = value;
            return this;
        }

        /** @param enabled normalise query and key heads before the rotary embedding (Megatron's qk_layernorm) @return this */
        public Builder qkLayernorm(boolean enabled) {
            this.qkNorm = enabled;
            return this;
        }

        /**
         * @param enabled overlap the linears' sequence-parallel collectives with their GEMMs (Megatron's
         *     {@code tp_comm_overlap}); needs {@link #sequenceParallel}
         * @return this
         */
        public Builder tpCommOverlap(boolean enabled) {
            this.tpOverlap = enabled;
            return this;
        }

        /**
         * @param enabled on GPUs, add the linears' weight gradients into {@code .grad} inside their GEMMs (Megatron's
         *     {@code gradient_accumulation_fusion}; default true)
         * @return this
         */
        public Builder gradientAccumulationFusion(boolean enabled) {
            this.accumulationFusion = enabled;
            return this;
        }

        /**
         * @param value sliding-window attention (Megatron's {@code window_size} and {@code window_attn_skip_freq}),
         *     or null for none
         * @return this
         */
        public Builder slidingWindow(SlidingWindow value) {
            this.window = value;
            return this;
        }

        /**
         * @param enabled norm weights centred on zero, applied as {@code 1 + weight} (Megatron-Core's
         *     {@code layernorm_zero_centered_gamma}, {@code --apply-layernorm-1p})
         * @return this
         */
        public Builder layernormZeroCenteredGamma(boolean enabled) {
            this.zeroCentered = enabled;
            return this;
        }

        /**
         * @param afterAttention a norm on the attention's output before its residual add (post_self_attn_layernorm)
         * @param afterMlp a norm on the MLP's output before its residual add (post_mlp_layernorm)
         * @return this
         */
        public Builder postLayernorms(boolean afterAttention, boolean afterMlp) {
            this.postAttnNorm = afterAttention;
            this.postMlpNorm = afterMlp;
            return this;
        }

        /** @param enabled multiply the word embeddings by sqrt(hidden size) (Gemma) @return this */
        public Builder scaleEmbeddingsBySqrtHidden(boolean enabled) {
            this.scaleEmbeddings = enabled;
            return this;
        }

        /** @param scale the attention scores' scale, or 0 for 1 / sqrt(kv channels) (Megatron's softmax_scale) @return this */
        public Builder softmaxScale(double scale) {
            this.scoreScale = scale;
            return this;
        }

        /** @param base RoPE base of the sliding-window layers, or 0 for the global one @return this */
        public Builder localRotaryBase(double base) {
            this.localRope = base;
            return this;
        }

        /**
         * @param value FP8 GEMMs in the layers' linears (Megatron's {@code --fp8-format} and its flags), or null for none
         * @return this
         */
        public Builder fp8(Fp8Config value) {
            this.fp8Config = value;
            return this;
        }

        /**
         * @param dims the widths of multi-latent attention, which every layer then uses (Megatron-Core's
         *     {@code multi_latent_attention}), or null for grouped-query self-attention
         * @return this
         */
        public Builder multiLatentAttention(MlaDims dims) {
            this.mla = dims;
            return this;
        }

        /**
         * @param settings multi-token prediction's depths and loss scale, or null for none
         * @return this
         */
        public Builder mtp(MtpSettings settings) {
            this.mtpSettings = settings;
            return this;
        }

        /** @return the validated config */
        public TransformerConfig build() {
            int groups = queryGroups < 0 ? heads : queryGroups;
            int ffnSize = ffn < 0 ? 4 * hidden : ffn;
            if (kv < 0 && hidden % heads != 0) {
                throw new IllegalArgumentException("hidden size " + hidden + " is not divisible by " + heads
                        + " heads; set kv channels explicitly");
            }
            int channels = kv < 0 ? hidden / heads : kv;
            return new TransformerConfig(layers, hidden, heads, groups, ffnSize, channels, vocab, maxSeq, norm, eps,
                    position, ropeBase, ropePercent, act, bias, tied, hiddenDrop, attnDrop, std, recomputeMode, method,
                    methodLayers, modules, sp,
                    type, moeSettings, cpComm, hierarchicalCp, qkvBias, scaling, qkNorm, tpOverlap, accumulationFusion, window,
                    zeroCentered,
                    postAttnNorm, postMlpNorm, scaleEmbeddings, scoreScale, localRope, fp8Config, mla,
                    mtpSettings);
        }
    }
}
