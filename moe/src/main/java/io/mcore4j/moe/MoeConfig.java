package io.mcore4j.moe;

import ai.djl.ndarray.types.DataType;
import io.mcore4j.tensorparallel.MlpActivation;

import java.util.Objects;

/**
 * Everything that describes one mixture-of-experts layer apart from the parallel layout: the
 * experts, the router and its load-balancing losses, token dropping and the dispatcher. Validated
 * on construction; the layout-dependent checks (experts divisible by the expert-parallel size,
 * widths divisible by the tensor-parallel sizes) happen in {@link MoeLayer#build}.
 *
 * @param numExperts number of routed experts E, at least 1
 * @param topK experts per token k, in {@code [1, E]}
 * @param ffnHiddenSize width F of each expert's MLP
 * @param activation expert MLP activation
 * @param routerScore how router logits become scores
 * @param preSoftmax with {@link RouterScore#SOFTMAX}: take the top-k of the softmax over all experts
 *                   (probabilities do not sum to 1 over the k) instead of the softmax over the top-k logits
 * @param numGroups group-limited routing: the experts form this many equal groups (0 = no groups; Megatron's
 *                  {@code moe_router_num_groups}, e.g. the expert-parallel size for device-limited routing)
 * @param groupTopK group-limited routing: each token picks its top-k experts among the experts of this many
 *                  groups, those whose sum of their {@code topK / groupTopK} best scores is largest (0 = no groups;
 *                  Megatron's {@code moe_router_group_topk})
 * @param topKScalingFactor multiplies the routing probabilities of the chosen experts (Megatron's
 *                          {@code moe_router_topk_scaling_factor}; 1 = none)
 * @param routerInFp32 compute the gating linear, scores and probabilities in float32 whatever the dtype
 * @param auxLossCoeff coefficient of the per-micro-batch load-balancing loss ({@code aux_loss}), 0 = off
 * @param seqAuxLossCoeff coefficient of the per-sequence load-balancing loss ({@code seq_aux_loss}), 0 = off
 * @param globalAuxLossCoeff coefficient of the load-balancing loss whose token counts are summed over
 *                           data parallelism and averaged over the micro-batches of a step ({@code global_aux_loss}), 0 = off
 * @param zLossCoeff coefficient of the router z-loss, 0 = off
 * @param auxLossFree aux-loss-free balancing: a per-expert bias added to the scores for selection only,
 *                    updated from token counts by {@link MoeLayer#updateExpertBias()}
 * @param biasUpdateRate step of the expert-bias update, {@code bias += rate * sign(mean count - count)}
 * @param inputJitter multiply router inputs by uniform noise in {@code [1 - eps, 1 + eps]}, 0 = off
 * @param capacityFactor expert capacity {@code ceil(T * k / E * factor)} tokens per expert and rank, 0 = no capacity (dropless)
 * @param dropPolicy which tokens an expert over capacity keeps
 * @param padToCapacity give every expert exactly its capacity of tokens (padding with unrouted tokens whose weight is 0)
 * @param dispatcher how tokens travel to the experts
 * @param sharedExpertFfnHiddenSize width of the always-active shared expert, 0 = none
 * @param initStd std of the router, expert fc1 and shared-expert fc1 initialisation
 * @param outputInitStd std of the expert fc2 and shared-expert fc2 initialisation (typically {@code initStd / sqrt(2 L)})
 * @param dtype parameter and compute dtype, FLOAT32 or FLOAT16
 * @param sequenceParallel the layer's input and output are split along the sequence over tensor parallelism
 * @param addBias experts (and the shared expert) have biases
 * @param batchedExperts run the local experts as one batched matmul when every local expert received the
 *                       same number of tokens (always the case with {@code padToCapacity})
 * @param groupedGemm run fc1 and fc2 of all local experts as one grouped matrix product each, whatever the
 *                    number of rows of each expert (Megatron's {@code moe_grouped_gemm}; libtorch's
 *                    {@code _grouped_mm} where the runtime has it, see {@link GroupedMatmul})
 * @param permuteFusion permute tokens into expert order and back in one call each (Megatron's
 *                      {@code moe_permute_fusion}; see {@link FusedTokenPermutation})
 * @param forceLoadBalancing for benchmarks only (Megatron's {@code moe_router_force_load_balancing}): each
 *                           routing uses random normal logits in place of the gating linear's, with the gradient
 *                           passed straight through to the real logits, so that every expert receives about the
 *                           same number of tokens whatever the weights (see {@link TopKRouter})
 * @param sharedExpertOverlap run the shared expert's forward while the dispatch's all-to-all travels (Megatron's
 *                            {@code moe_shared_expert_overlap}; the all-to-all dispatcher only; no effect without a
 *                            shared expert); without it the forward runs while the host waits for the dispatch's
 *                            counts. See {@link TokenDispatcher.Beside}
 */
public record MoeConfig(int numExperts, int topK, int ffnHiddenSize, MlpActivation activation, RouterScore routerScore,
                        boolean preSoftmax, int numGroups, int groupTopK, double topKScalingFactor,
                        boolean routerInFp32, double auxLossCoeff, double seqAuxLossCoeff,
                        double globalAuxLossCoeff, double zLossCoeff, boolean auxLossFree, double biasUpdateRate,
                        double inputJitter, double capacityFactor, DropPolicy dropPolicy, boolean padToCapacity,
                        Dispatcher dispatcher, int sharedExpertFfnHiddenSize, double initStd, double outputInitStd,
                        DataType dtype, boolean sequenceParallel, boolean addBias, boolean batchedExperts,
                        boolean groupedGemm, boolean permuteFusion, boolean forceLoadBalancing,
                        boolean sharedExpertOverlap) {

    /** Score function of the router. */
    public enum RouterScore {
        /** Softmax over experts (before or after the top-k, see {@code preSoftmax}). */
        SOFTMAX,
        /** Sigmoid per expert; the k selected scores are renormalised to sum to 1 (when k > 1). */
        SIGMOID
    }

    /** Which tokens an expert keeps when more than its capacity are routed to it. */
    public enum DropPolicy {
        /** The tokens with the highest routing probabilities. */
        PROBS,
        /** The earliest tokens (lowest position in the flattened {@code [s, b]} order). */
        POSITION
    }

    /** How tokens reach the experts of other ranks. */
    public enum Dispatcher {
        /** All-gather tokens, probabilities and routing map over expert-TP x EP; reduce-scatter the outputs. */
        ALL_GATHER,
        /** Permute by expert, uneven all-to-all over EP (and all-gather over expert-TP); the inverse on combine. */
        ALL_TO_ALL
    }

    /**
     * Validates every option.
     *
     * @throws IllegalArgumentException naming the offending value and what was expected
     */
    public MoeConfig {
        Objects.requireNonNull(activation, "activation");
        Objects.requireNonNull(routerScore, "routerScore");
        Objects.requireNonNull(dropPolicy, "dropPolicy");
        Objects.requireNonNull(dispatcher, "dispatcher");
        Objects.requireNonNull(dtype, "dtype");
        if (numExperts < 1) {
            throw new IllegalArgumentException("number of experts must be at least 1, got " + numExperts);
        }
        if (topK < 1 || topK > numExperts) {
            throw new IllegalArgumentException("top-k " + topK + " must be in [1, " + numExperts + "] (the number of experts)");
        }
        if (ffnHiddenSize < 1) {
            throw new IllegalArgumentException("expert ffn hidden size must be at least 1, got " + ffnHiddenSize);
        }
        if (preSoftmax && routerScore != RouterScore.SOFTMAX) {
            throw new IllegalArgumentException("preSoftmax applies to SOFTMAX scoring only, but the router score is " + routerScore);
        }
        checkGroups(numExperts, topK, numGroups, groupTopK);
        if (!(topKScalingFactor > 0) || Double.isInfinite(topKScalingFactor)) {
            throw new IllegalArgumentException("top-k scaling factor " + topKScalingFactor + " must be finite and > 0");
        }
        nonNegative("aux loss coefficient", auxLossCoeff);
        nonNegative("sequence aux loss coefficient", seqAuxLossCoeff);
        nonNegative("global aux loss coefficient", globalAuxLossCoeff);
        nonNegative("z-loss coefficient", zLossCoeff);
        nonNegative("expert bias update rate", biasUpdateRate);
        if (auxLossFree && routerScore != RouterScore.SIGMOID) {
            // Megatron-Core's rule: the bias shifts scores that are not normalised over all experts
            throw new IllegalArgumentException("aux-loss-free balancing (expert bias) needs SIGMOID scores, but the router"
                    + " score is " + routerScore);
        }
        if (auxLossFree && biasUpdateRate == 0) {
            throw new IllegalArgumentException("aux-loss-free balancing needs a positive bias update rate, got 0");
        }
        if (!(inputJitter >= 0 && inputJitter < 1)) {
            throw new IllegalArgumentException("input jitter " + inputJitter + " must be in [0, 1)");
        }
        nonNegative("capacity factor", capacityFactor);
        if (padToCapacity && capacityFactor == 0) {
            throw new IllegalArgumentException("padToCapacity needs a capacity factor > 0, got 0 (no capacity)");
        }
        if (sharedExpertFfnHiddenSize < 0) {
            throw new IllegalArgumentException("shared expert ffn hidden size must be >= 0 (0 = none), got "
                    + sharedExpertFfnHiddenSize);
        }
        if (sharedExpertOverlap && sharedExpertFfnHiddenSize > 0 && dispatcher != Dispatcher.ALL_TO_ALL) {
            // Megatron-Core's rule
            throw new IllegalArgumentException("the shared expert's overlap with the dispatch needs the ALL_TO_ALL"
                    + " dispatcher, but the dispatcher is " + dispatcher);
        }
        if (!(initStd > 0) || Double.isInfinite(initStd)) {
            throw new IllegalArgumentException("init std " + initStd + " must be finite and > 0");
        }
        if (!(outputInitStd > 0) || Double.isInfinite(outputInitStd)) {
            throw new IllegalArgumentException("output init std " + outputInitStd + " must be finite and > 0");
        }
        if (dtype != DataType.FLOAT32 && dtype != DataType.FLOAT16 && dtype != DataType.BFLOAT16) {
            throw new IllegalArgumentException("dtype " + dtype + " is not supported: use FLOAT32, FLOAT16 or BFLOAT16");
        }
    }

    /**
     * A builder with Megatron-Core's defaults: GELU, softmax after top-k, no auxiliary losses, dropless,
     * all-gather dispatcher, no shared expert, init std 0.02, float32.
     *
     * @param numExperts number of experts
     * @param topK experts per token
     * @param ffnHiddenSize expert MLP width
     * @return the builder
     */
    public static Builder builder(int numExperts, int topK, int ffnHiddenSize) {
        return new Builder(numExperts, topK, ffnHiddenSize);
    }

    /** @return a builder holding this config's values */
    public Builder toBuilder() {
        Builder b = new Builder(numExperts, topK, ffnHiddenSize);
        b.activation = activation;
        b.routerScore = routerScore;
        b.preSoftmax = preSoftmax;
        b.numGroups = numGroups;
        b.groupTopK = groupTopK;
        b.topKScalingFactor = topKScalingFactor;
        b.routerInFp32 = routerInFp32;
        b.auxLossCoeff = auxLossCoeff;
        b.seqAuxLossCoeff = seqAuxLossCoeff;
        b.globalAuxLossCoeff = globalAuxLossCoeff;
        b.zLossCoeff = zLossCoeff;
        b.auxLossFree = auxLossFree;
        b.biasUpdateRate = biasUpdateRate;
        b.inputJitter = inputJitter;
        b.capacityFactor = capacityFactor;
        b.dropPolicy = dropPolicy;
        b.padToCapacity = padToCapacity;
        b.dispatcher = dispatcher;
        b.sharedExpertFfnHiddenSize = sharedExpertFfnHiddenSize;
        b.initStd = initStd;
        b.outputInitStd = outputInitStd;
        b.dtype = dtype;
        b.sequenceParallel = sequenceParallel;
        b.addBias = addBias;
        b.batchedExperts = batchedExperts;
        b.groupedGemm = groupedGemm;
        b.permuteFusion = permuteFusion;
        b.forceLoadBalancing = forceLoadBalancing;
        b.sharedExpertOverlap = sharedExpertOverlap;
        return b;
    }

    /**
     * Megatron-Core's conditions on group-limited routing, plus two of mcore4j's: with fewer experts per token than
     * groups per token the groups would be ranked by a sum of nothing, and the chosen groups must hold at least
     * {@code topK} experts.
     */
    private static void checkGroups(int numExperts, int topK, int numGroups, int groupTopK) {
        if (numGroups < 0 || groupTopK < 0) {
            throw new IllegalArgumentException("router groups " + numGroups + " and group top-k " + groupTopK
                    + " must be >= 0 (0 = no group-limited routing)");
        }
        if ((numGroups == 0) != (groupTopK == 0)) {
            throw new IllegalArgumentException("group-limited routing needs both the number of groups and the group top-k,"
                    + " got " + numGroups + " groups and group top-k " + groupTopK);
        }
        if (numGroups == 0) {
            return;
        }
        if (numExperts % numGroups != 0) {
            throw new IllegalArgumentException(numExperts + " experts are not divisible by " + numGroups + " router groups");
        }
        if (groupTopK > numGroups) {
            throw new IllegalArgumentException("group top-k " + groupTopK + " must be at most the " + numGroups
                    + " router groups");
        }
        if (groupTopK > topK) {
            throw new IllegalArgumentException("group top-k " + groupTopK + " must be at most top-k " + topK
                    + " (groups are ranked by the sum of their top-k / group top-k best scores)");
        }
        if (topK > groupTopK * (numExperts / numGroups)) {
            throw new IllegalArgumentException("top-k " + topK + " exceeds the " + groupTopK * (numExperts / numGroups)
                    + " experts of " + groupTopK + " groups of " + numExperts / numGroups);
        }
    }

    /** @return whether tokens choose among a subset of expert groups (group-limited routing) */
    public boolean hasGroupLimitedRouting() {
        return groupTopK > 0;
    }

    /** @return whether any load-balancing loss or the z-loss is on */
    public boolean hasAuxiliaryLoss() {
        return auxLossCoeff > 0 || seqAuxLossCoeff > 0 || globalAuxLossCoeff > 0 || zLossCoeff > 0;
    }

    /** @return whether tokens are dropped beyond a capacity */
    public boolean hasCapacity() {
        return capacityFactor > 0;
    }

    private static void nonNegative(String what, double value) {
        if (!(value >= 0) || Double.isInfinite(value)) {
            throw new IllegalArgumentException(what + " must be finite and >= 0, got " + value);
        }
    }

    /** Builder for {@link MoeConfig}; see the record components for each option. */
    public static final class Builder {
        private final int numExperts;
        private final int topK;
        private final int ffnHiddenSize;
        private MlpActivation activation = MlpActivation.GELU;
        private RouterScore routerScore = RouterScore.SOFTMAX;
        private boolean preSoftmax;
        private int numGroups;
        private int groupTopK;
        private double topKScalingFactor = 1;
        private boolean routerInFp32;
        private double auxLossCoeff;
        private double seqAuxLossCoeff;
        private double globalAuxLossCoeff;
        private double zLossCoeff;
        private boolean auxLossFree;
        private double biasUpdateRate = 1e-3;
        private double inputJitter;
        private double capacityFactor;
        private DropPolicy dropPolicy = DropPolicy.PROBS;
        private boolean padToCapacity;
        private Dispatcher dispatcher = Dispatcher.ALL_GATHER;
        private int sharedExpertFfnHiddenSize;
        private double initStd = 0.02;
        private double outputInitStd = 0.02;
        private DataType dtype = DataType.FLOAT32;
        private boolean sequenceParallel;
        private boolean addBias;
        private boolean batchedExperts = true;
        private boolean groupedGemm;
        private boolean permuteFusion;
        private boolean forceLoadBalancing;
        private boolean sharedExpertOverlap;

        private Builder(int numExperts, int topK, int ffnHiddenSize) {
            this.numExperts = numExperts;
            this.topK = topK;
            this.ffnHiddenSize = ffnHiddenSize;
        }

        /** @param value expert activation (default GELU) @return this */
        public Builder activation(MlpActivation value) {
            this.activation = value;
            return this;
        }

        /** @param value score function (default SOFTMAX) @return this */
        public Builder routerScore(RouterScore value) {
            this.routerScore = value;
            return this;
        }

        /** @param value softmax before the top-k (default false) @return this */
        public Builder preSoftmax(boolean value) {
            this.preSoftmax = value;
            return this;
        }

        /**
         * Group-limited routing (both 0 = off, the default).
         *
         * @param groups equal groups the experts form
         * @param groupsPerToken groups each token chooses its experts from
         * @return this
         */
        public Builder groupLimitedRouting(int groups, int groupsPerToken) {
            this.numGroups = groups;
            this.groupTopK = groupsPerToken;
            return this;
        }

        /** @param value factor on the chosen experts' probabilities (default 1) @return this */
        public Builder topKScalingFactor(double value) {
            this.topKScalingFactor = value;
            return this;
        }

        /** @param value route in float32 (default false: in the layer's dtype) @return this */
        public Builder routerInFp32(boolean value) {
            this.routerInFp32 = value;
            return this;
        }

        /** @param value per-micro-batch load-balancing loss coefficient (default 0) @return this */
        public Builder auxLossCoeff(double value) {
            this.auxLossCoeff = value;
            return this;
        }

        /** @param value per-sequence load-balancing loss coefficient (default 0) @return this */
        public Builder seqAuxLossCoeff(double value) {
            this.seqAuxLossCoeff = value;
            return this;
        }

        /** @param value global-batch load-balancing loss coefficient (default 0) @return this */
        public Builder globalAuxLossCoeff(double value) {
            this.globalAuxLossCoeff = value;
            return this;
        }

        /** @param value z-loss coefficient (default 0) @return this */
        public Builder zLossCoeff(double value) {
            this.zLossCoeff = value;
            return this;
        }

        /** @param value aux-loss-free balancing with an expert bias (default false) @return this */
        public Builder auxLossFree(boolean value) {
            this.auxLossFree = value;
            return this;
        }

        /** @param value expert bias update rate (default 1e-3) @return this */
        public Builder biasUpdateRate(double value) {
            this.biasUpdateRate = value;
            return this;
        }

        /** @param value input jitter epsilon (default 0 = off) @return this */
        public Builder inputJitter(double value) {
            this.inputJitter = value;
            return this;
        }

        /** @param value capacity factor (default 0 = dropless) @return this */
        public Builder capacityFactor(double value) {
            this.capacityFactor = value;
            return this;
        }

        /** @param value drop policy (default PROBS) @return this */
        public Builder dropPolicy(DropPolicy value) {
            this.dropPolicy = value;
            return this;
        }

        /** @param value pad every expert to its capacity (default false) @return this */
        public Builder padToCapacity(boolean value) {
            this.padToCapacity = value;
            return this;
        }

        /** @param value token dispatcher (default ALL_GATHER) @return this */
        public Builder dispatcher(Dispatcher value) {
            this.dispatcher = value;
            return this;
        }

        /** @param value shared expert width (default 0 = none) @return this */
        public Builder sharedExpertFfnHiddenSize(int value) {
            this.sharedExpertFfnHiddenSize = value;
            return this;
        }

        /** @param value init std (default 0.02) @return this */
        public Builder initStd(double value) {
            this.initStd = value;
            return this;
        }

        /** @param value output-layer init std (default 0.02) @return this */
        public Builder outputInitStd(double value) {
            this.outputInitStd = value;
            return this;
        }

        /** @param value parameter dtype (default FLOAT32) @return this */
        public Builder dtype(DataType value) {
            this.dtype = value;
            return this;
        }

        /** @param value input split along the sequence over TP (default false) @return this */
        public Builder sequenceParallel(boolean value) {
            this.sequenceParallel = value;
            return this;
        }

        /** @param value experts have biases (default false) @return this */
        public Builder addBias(boolean value) {
            this.addBias = value;
            return this;
        }

        /** @param value batched matmul for equal expert loads (default true) @return this */
        public Builder batchedExperts(boolean value) {
            this.batchedExperts = value;
            return this;
        }

        /** @param value one grouped matrix product for fc1 and one for fc2 of all local experts (default false) @return this */
        public Builder groupedGemm(boolean value) {
            this.groupedGemm = value;
            return this;
        }

        /** @param value fused token permutation and unpermutation (default false) @return this */
        public Builder permuteFusion(boolean value) {
            this.permuteFusion = value;
            return this;
        }

        /**
         * @param value route on random logits with a straight-through gradient, for benchmarks (default false)
         * @return this
         */
        public Builder forceLoadBalancing(boolean value) {
            this.forceLoadBalancing = value;
            return this;
        }

        /**
         * @param value run the shared expert's forward while the dispatch's all-to-all travels (default false)
         * @return this
         */
        public Builder sharedExpertOverlap(boolean value) {
            this.sharedExpertOverlap = value;
            return this;
        }

        /**
         * @return the validated config
         * @throws IllegalArgumentException as {@link MoeConfig#MoeConfig}
         */
        public MoeConfig build() {
            return new MoeConfig(numExperts, topK, ffnHiddenSize, activation, routerScore, preSoftmax, numGroups, groupTopK,
                    topKScalingFactor, routerInFp32, auxLossCoeff, seqAuxLossCoeff, globalAuxLossCoeff, zLossCoeff, auxLossFree, biasUpdateRate,
                    inputJitter, capacityFactor, dropPolicy, padToCapacity, dispatcher, sharedExpertFfnHiddenSize,
                    initStd, outputInitStd, dtype, sequenceParallel, addBias, batchedExperts, groupedGemm,
                    permuteFusion, forceLoadBalancing, sharedExpertOverlap);
        }
    }
}
