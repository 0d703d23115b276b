package io.mcore4j.models;

import ai.djl.ndarray.types.DataType;
import io.mcore4j.contextparallel.CpCommType;
import io.mcore4j.moe.MoeConfig;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.tensorparallel.MlpActivation;

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
 * @param recompute activation recompute granularity
 * @param sequenceParallel shard norms, dropout and residuals along the sequence over TP
 * @param dtype parameter and compute dtype (Megatron's params_dtype): FLOAT32, FLOAT16 or BFLOAT16
 * @param moe mixture-of-experts settings, or null for dense MLPs
 * @param cpCommType how attention exchanges keys and values across the context-parallel group
 *     (Megatron's {@code cp_comm_type}); unused when the context-parallel size is 1
 * @param addQkvBias biases on the fused QKV projection even without {@code addBiasLinear}
 *     (Megatron's {@code add_qkv_bias}; Qwen2)
 * @param ropeScaling frequency scaling of the rotary embedding (LLaMA 3.1's), or null for none
 * @param qkLayernorm normalise each query and key head over its channels (the layer's norm kind) before
 *     the rotary embedding (Megatron's {@code qk_layernorm}; Qwen3, OLMo 2)
 */
public record TransformerConfig(int numLayers, int hiddenSize, int numAttentionHeads, int numQueryGroups,
                                int ffnHiddenSize, int kvChannels, int vocabSize, int maxSequenceLength,
                                Normalization normalization, double normEpsilon,
                                PositionEmbedding positionEmbedding, double rotaryBase, double rotaryPercent,
                                MlpActivation activation, boolean addBiasLinear, boolean tiedEmbeddings,
                                double hiddenDropout, double attentionDropout, double initStd,
                                Recompute recompute, boolean sequenceParallel, DataType dtype, MoeSettings moe,
                                CpCommType cpCommType, boolean addQkvBias, RopeScaling ropeScaling,
                                boolean qkLayernorm) {

    /** Normalisation layer kind. */
    public enum Normalization { LAYER_NORM, RMS_NORM }

    /** Position encoding. */
    public enum PositionEmbedding { LEARNED_ABSOLUTE, ROPE }

    /** Activation recompute granularity: none, core attention only, or whole layers. */
    public enum Recompute { NONE, SELECTIVE, FULL }

    /**
     * Mixture-of-experts settings.
     *
     * @param numExperts experts per MoE layer
     * @param topK experts per token
     * @param layerFrequency every n-th layer is MoE (1 = all)
     * @param ffnHiddenSize expert MLP width
     * @param auxLossCoeff load-balancing loss coefficient
     * @param dispatcher how tokens reach the experts' ranks
     */
    public record MoeSettings(int numExperts, int topK, int layerFrequency, int ffnHiddenSize, double auxLossCoeff,
                              MoeConfig.Dispatcher dispatcher) {
        /** Validates the counts. */
        public MoeSettings {
            if (numExperts < 1 || topK < 1 || topK > numExperts) {
                throw new IllegalArgumentException("top-k " + topK + " must be in [1, " + numExperts + " experts]");
            }
            if (dispatcher == null) {
                throw new IllegalArgumentException("the MoE dispatcher must be given (ALL_GATHER or ALL_TO_ALL)");
            }
            if (layerFrequency < 1 || ffnHiddenSize < 1) {
                throw new IllegalArgumentException("MoE layer frequency " + layerFrequency + " and ffn size "
                        + ffnHiddenSize + " must be positive");
            }
        }
    }

    /**
     * LLaMA 3.1's rotary frequency scaling ({@code rope_scaling} of type {@code llama3}): with
     * wavelength {@code w = 2 pi / f} of each inverse frequency f, frequencies with
     * {@code w > originalMaxPositions / lowFreqFactor} are divided by {@code factor}, those with
     * {@code w < originalMaxPositions / highFreqFactor} are kept, and those between are interpolated.
     *
     * @param factor the scale of low frequencies, above 0
     * @param lowFreqFactor the low-frequency bound's divisor
     * @param highFreqFactor the high-frequency bound's divisor, above {@code lowFreqFactor}
     * @param originalMaxPositions the context length the model was pre-trained with
     */
    public record RopeScaling(double factor, double lowFreqFactor, double highFreqFactor, int originalMaxPositions) {
        /** Validates the factors. */
        public RopeScaling {
            if (!(factor > 0) || !(lowFreqFactor > 0) || !(highFreqFactor > lowFreqFactor) || originalMaxPositions < 1) {
                throw new IllegalArgumentException("rope scaling factor " + factor + ", low/high frequency factors "
                        + lowFreqFactor + "/" + highFreqFactor + " and original max positions " + originalMaxPositions
                        + " must be positive with high > low");
            }
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
        if (moe != null && moe.numExperts() % dims.expertParallel() != 0) {
            throw new IllegalArgumentException(moe.numExperts() + " experts are not divisible by expert parallel size "
                    + dims.expertParallel());
        }
    }

    /**
     * Whether global layer {@code layerNumber} has a mixture of experts instead of a dense MLP
     * (every {@code layerFrequency}-th layer, starting with layer 0).
     *
     * @param layerNumber a global layer index
     * @return true for MoE layers
     */
    public boolean isMoeLayer(int layerNumber) {
        return moe != null && layerNumber % moe.layerFrequency() == 0;
    }

    /** @return whether rotary position embeddings are used */
    public boolean usesRope() {
        return positionEmbedding == PositionEmbedding.ROPE;
    }

    /**
     * Training FLOPs per token (forward + backward), Megatron's formula for a GPT with
     * {@code 4h} MLP: {@code 72 L h^2 + 12 L h s + 6 h V} for sequence length {@code s}.
     *
     * @param seqLength tokens per sequence
     * @return FLOPs per token
     */
    public double flopsPerToken(int seqLength) {
        double l = numLayers;
        double h = hiddenSize;
        return 72 * l * h * h + 12 * l * h * seqLength + 6 * h * vocabSize;
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
        b.sp = sequenceParallel;
        b.type = dtype;
        b.moeSettings = moe;
        b.cpComm = cpCommType;
        b.qkvBias = addQkvBias;
        b.scaling = ropeScaling;
        b.qkNorm = qkLayernorm;
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
        private final int vocab;
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
        private boolean sp;
        private DataType type = DataType.FLOAT32;
        private MoeSettings moeSettings;
        private CpCommType cpComm = CpCommType.P2P;
        private boolean qkvBias;
        private RopeScaling scaling;
        private boolean qkNorm;

        private Builder(int layers, int hidden, int heads, int vocab) {
            this.layers = layers;
            this.hidden = hidden;
            this.heads = heads;
            this.vocab = vocab;
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

        /** @param mode recompute granularity @return this */
        public Builder recompute(Recompute mode) {
            this.recomputeMode = mode;
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
                    position, ropeBase, ropePercent, act, bias, tied, hiddenDrop, attnDrop, std, recomputeMode, sp,
                    type, moeSettings, cpComm, qkvBias, scaling, qkNorm);
        }
    }
}
