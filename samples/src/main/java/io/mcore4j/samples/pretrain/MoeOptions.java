package io.mcore4j.samples.pretrain;

import io.mcore4j.models.MoeLayerPattern;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.moe.MoeConfig;
import picocli.CommandLine.Option;

import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;

/**
 * The mixture-of-experts flags of {@code pretrain-gpt} (and so of the benchmark), as a picocli mixin: Megatron-LM's
 * names, defaults and rules, mapped onto the model's {@link TransformerConfig.MoeSettings} by {@link #settings}.
 * Validation raises {@link IllegalArgumentException} with one line naming the flag and its value. Megatron's
 * {@code sinkhorn} and {@code quantile_balancing} balancing, {@code sqrtsoftplus} scores and {@code fp64} routing
 * are refused.
 */
public final class MoeOptions {
    /** Megatron's {@code --moe-token-dispatcher-type} values. */
    public enum DispatcherKind { allgather, alltoall }

    private static final Set<String> LOAD_BALANCING = Set.of("aux_loss", "seq_aux_loss", "global_aux_loss", "none");

    @Option(names = "--num-experts", description = "Experts per MoE layer (0: dense MLPs). Default: ${DEFAULT-VALUE}.")
    int numExperts = 0;
    @Option(names = "--moe-router-topk", description = "Experts per token. Default: ${DEFAULT-VALUE}.")
    int topK = 2;
    @Option(names = "--moe-ffn-hidden-size", description = "0: --ffn-hidden-size. Default: ${DEFAULT-VALUE}.")
    int ffnHiddenSize = 0;
    @Option(names = "--moe-layer-freq", description = "Which layers are MoE layers: N (every N-th, from layer 0) or a"
            + " Python list expression with one 0 (dense) or 1 (MoE) per layer, such as ([0]*1+[1]*3) or [0,1,1,1]"
            + " (evaluated, not executed). Default: ${DEFAULT-VALUE}.")
    String layerFreq = "1";
    @Option(names = "--moe-router-load-balancing-type", arity = "1..*", paramLabel = "TYPE",
            description = "aux_loss (the micro-batch's switch-transformer loss), seq_aux_loss (per sequence),"
                    + " global_aux_loss (counts over data parallelism and the step's micro-batches) or none; several"
                    + " types take one --moe-aux-loss-coeff each. Megatron's sinkhorn and quantile_balancing are refused."
                    + " Default: aux_loss.")
    List<String> loadBalancingTypes;
    @Option(names = "--moe-aux-loss-coeff", arity = "1..*", paramLabel = "COEFF",
            description = "The load-balancing loss coefficient, one per --moe-router-load-balancing-type. Default: 0.")
    List<Double> auxLossCoeffs;
    @Option(names = "--moe-z-loss-coeff", description = "Router z-loss coefficient. Default: none.")
    Double zLossCoeff;
    @Option(names = "--moe-router-score-function", description = "softmax or sigmoid. Default: ${DEFAULT-VALUE}.")
    String scoreFunction = "softmax";
    @Option(names = "--moe-router-pre-softmax", description = "Softmax over all experts before the top-k (softmax scores).")
    boolean preSoftmax;
    @Option(names = "--moe-router-enable-expert-bias", description = "Aux-loss-free balancing: a per-expert bias on the"
            + " sigmoid scores for the choice, moved after each step towards balance.")
    boolean expertBias;
    @Option(names = "--moe-router-bias-update-rate", description = "Step of the expert-bias update. Default: ${DEFAULT-VALUE}.")
    double biasUpdateRate = 1e-3;
    @Option(names = "--moe-router-num-groups", description = "Group-limited routing: the experts form this many equal"
            + " groups (e.g. the expert-parallel size: device-limited routing). Default: none.")
    Integer numGroups;
    @Option(names = "--moe-router-group-topk", description = "Group-limited routing: groups each token chooses its experts"
            + " from. Default: none.")
    Integer groupTopK;
    @Option(names = "--moe-router-topk-scaling-factor", description = "Factor on the chosen experts' probabilities."
            + " Default: none.")
    Double topKScalingFactor;
    @Option(names = "--moe-router-dtype", description = "fp32: route (gating linear, scores, probabilities) in float32."
            + " Default: the parameters' dtype.")
    String routerDtype;
    @Option(names = "--moe-input-jitter-eps", description = "Multiply router inputs by uniform noise in [1 - eps, 1 + eps]."
            + " Default: none.")
    Double inputJitterEps;
    @Option(names = "--moe-shared-expert-intermediate-size", description = "Width of the shared expert every token"
            + " passes through. Default: none.")
    Integer sharedExpertIntermediateSize;
    @Option(names = "--moe-shared-expert-overlap", description = "Run the shared expert's forward while the dispatch's"
            + " all-to-all travels (alltoall dispatcher; no effect without a shared expert).")
    boolean sharedExpertOverlap;
    @Option(names = "--moe-expert-capacity-factor", description = "Each expert takes at most ceil(tokens x topk / experts x"
            + " factor) tokens per rank (negative: no capacity, as in Megatron). Default: none (dropless).")
    Double capacityFactor;
    @Option(names = "--moe-pad-expert-input-to-capacity", description = "Pad every expert's input to its capacity.")
    boolean padToCapacity;
    @Option(names = "--moe-token-drop-policy", description = "probs (an expert over capacity keeps its most probable"
            + " tokens) or position (its first). Default: ${DEFAULT-VALUE}.")
    String dropPolicy = "probs";
    @Option(names = "--moe-token-dispatcher-type", description = "${COMPLETION-CANDIDATES}. Default: ${DEFAULT-VALUE}.")
    DispatcherKind dispatcher = DispatcherKind.allgather;
    @Option(names = "--moe-grouped-gemm", description = "Each MoE layer's local experts run fc1 and fc2 as one grouped"
            + " product each (libtorch's _grouped_mm from libtorch 2.8 on where the device and dtype run it, else one"
            + " batched matmul over rows padded per expert).")
    boolean groupedGemm;
    @Option(names = "--moe-permute-fusion", description = "Permute tokens into expert order and back in one call each"
            + " (mcore4j's TorchScript modules).")
    boolean permuteFusion;
    @Option(names = "--moe-router-force-load-balancing", description = "For benchmarks only: route every token on"
            + " random logits (the gradient passes straight through to the router's), so that the experts receive"
            + " about equal loads whatever the weights.")
    boolean forceLoadBalancing;
    @Option(names = "--moe-per-layer-logging", description = "Also log each MoE layer's auxiliary losses (moe/<name>_layer_<i>).")
    boolean perLayerLogging;

    /** @return {@code --num-experts} (0: a dense model) */
    int numExperts() {
        return numExperts;
    }

    /**
     * @return the parsed {@code --moe-layer-freq}
     * @throws IllegalArgumentException naming the flag
     */
    MoeLayerPattern layerPattern() {
        return PretrainArgs.parsed("--moe-layer-freq", layerFreq, MoeLayerPattern::parse);
    }

    /** @return {@code --moe-shared-expert-intermediate-size}, 0 without it */
    int sharedExpertFfnHiddenSize() {
        return sharedExpertIntermediateSize == null ? 0 : sharedExpertIntermediateSize;
    }

    /**
     * Checks every MoE flag on its own and against {@code --num-experts} and {@code --num-layers}, as Megatron does.
     *
     * @param numLayers {@code --num-layers}
     * @throws IllegalArgumentException one line naming the flag and its value
     */
    void check(int numLayers) {
        PretrainArgs.atLeastZero("--moe-ffn-hidden-size", ffnHiddenSize);
        MoeLayerPattern pattern = layerPattern();
        if (pattern.frequency() == 0 && pattern.layers().size() != numLayers) {
            throw new IllegalArgumentException("--moe-layer-freq " + layerFreq + " has " + pattern.layers().size()
                    + " entries for --num-layers " + numLayers + " (one 0 or 1 per layer)");
        }
        for (double c : auxLossCoeffs()) {
            PretrainArgs.atLeastZero("--moe-aux-loss-coeff", c);
        }
        checkedLoadBalancingTypes();
        if (zLossCoeff != null) {
            PretrainArgs.atLeastZero("--moe-z-loss-coeff", zLossCoeff);
        }
        PretrainArgs.atLeastZero("--moe-router-bias-update-rate", biasUpdateRate);
        if (!Set.of("softmax", "sigmoid").contains(scoreFunction)) {
            throw new IllegalArgumentException("--moe-router-score-function " + scoreFunction + " is not one of softmax,"
                    + " sigmoid" + (scoreFunction.equals("sqrtsoftplus") ? " (mcore4j has no sqrtsoftplus scores)" : ""));
        }
        if (preSoftmax && !scoreFunction.equals("softmax")) {
            throw new IllegalArgumentException("--moe-router-pre-softmax applies to --moe-router-score-function softmax,"
                    + " not " + scoreFunction);
        }
        if (expertBias && !scoreFunction.equals("sigmoid")) {
            // Megatron's rule and (nearly) its words
            throw new IllegalArgumentException("--moe-router-enable-expert-bias (aux-loss-free routing) needs"
                    + " --moe-router-score-function sigmoid, not " + scoreFunction);
        }
        if (expertBias && biasUpdateRate == 0) {
            throw new IllegalArgumentException("--moe-router-enable-expert-bias needs --moe-router-bias-update-rate > 0");
        }
        if (topKScalingFactor != null && (!(topKScalingFactor > 0) || topKScalingFactor.isInfinite())) {
            throw new IllegalArgumentException("--moe-router-topk-scaling-factor " + topKScalingFactor + " must be a"
                    + " finite number > 0 (leave the flag out for none)");
        }
        if (routerDtype != null && !routerDtype.equals("fp32")) {
            throw new IllegalArgumentException("--moe-router-dtype " + routerDtype + " is not fp32"
                    + (routerDtype.equals("fp64") ? " (mcore4j routes in float32 at most)" : ""));
        }
        if (inputJitterEps != null && !(inputJitterEps >= 0 && inputJitterEps < 1)) {
            throw new IllegalArgumentException("--moe-input-jitter-eps " + inputJitterEps + " must be at least 0 and below 1");
        }
        if (sharedExpertIntermediateSize != null && sharedExpertIntermediateSize < 1) {
            throw new IllegalArgumentException("--moe-shared-expert-intermediate-size " + sharedExpertIntermediateSize
                    + " must be at least 1 (the shared experts' total width)");
        }
        if (sharedExpertOverlap && sharedExpertIntermediateSize != null && dispatcher != DispatcherKind.alltoall) {
            // Megatron's rule
            throw new IllegalArgumentException("--moe-shared-expert-overlap works with --moe-token-dispatcher-type"
                    + " alltoall only, not " + dispatcher);
        }
        if (capacityFactor != null && (capacityFactor.isNaN() || capacityFactor.isInfinite())) {
            throw new IllegalArgumentException("--moe-expert-capacity-factor " + capacityFactor + " must be a finite number");
        }
        if (padToCapacity && capacity() == 0) {
            throw new IllegalArgumentException("--moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor");
        }
        if (!Set.of("probs", "position").contains(dropPolicy)) {
            throw new IllegalArgumentException("--moe-token-drop-policy " + dropPolicy + " is not one of probs, position");
        }
        if (numExperts > 0) {
            checkRouting();
        }
    }

    /** The checks that involve {@code --num-experts} and {@code --moe-router-topk}. */
    private void checkRouting() {
        if (topK < 1 || topK > numExperts) {
            throw new IllegalArgumentException("--moe-router-topk " + topK + " must be from 1 to --num-experts " + numExperts);
        }
        if (topK == 1 && scoreFunction.equals("softmax") && !preSoftmax) {
            // Megatron's rule: the softmax of one logit is 1, so the router would get no gradient
            throw new IllegalArgumentException("--moe-router-topk 1 with the softmax after the top-k gives the router no"
                    + " gradient: add --moe-router-pre-softmax");
        }
        if (groupTopK == null) {
            if (numGroups != null) {
                throw new IllegalArgumentException("--moe-router-num-groups " + numGroups + " has no effect without"
                        + " --moe-router-group-topk");
            }
            return;
        }
        if (numGroups == null) {
            throw new IllegalArgumentException("--moe-router-group-topk " + groupTopK + " needs --moe-router-num-groups");
        }
        if (numGroups < 1 || numExperts % numGroups != 0) {
            throw new IllegalArgumentException("--moe-router-num-groups " + numGroups + " must divide --num-experts "
                    + numExperts);
        }
        if (groupTopK < 1 || groupTopK > numGroups || groupTopK > topK) {
            throw new IllegalArgumentException("--moe-router-group-topk " + groupTopK + " must be from 1 to"
                    + " --moe-router-num-groups " + numGroups + " and at most --moe-router-topk " + topK);
        }
        if (topK > groupTopK * (numExperts / numGroups)) {
            throw new IllegalArgumentException("--moe-router-topk " + topK + " exceeds the " + groupTopK * (numExperts / numGroups)
                    + " experts of --moe-router-group-topk " + groupTopK + " groups");
        }
    }

    /**
     * The model's MoE settings, or null without experts.
     *
     * @param denseFfnHiddenSize the dense MLP width (the experts' default)
     * @return the settings, or null with {@code --num-experts 0}
     * @throws IllegalArgumentException naming the flags, as {@link #check}
     */
    TransformerConfig.MoeSettings settings(int denseFfnHiddenSize) {
        if (numExperts == 0) {
            return null;
        }
        MoeConfig.Builder b = MoeConfig.builder(numExperts, topK, ffnHiddenSize > 0 ? ffnHiddenSize
                        : denseFfnHiddenSize)
                .routerScore(MoeConfig.RouterScore.valueOf(scoreFunction.toUpperCase(Locale.ROOT)))
                .preSoftmax(preSoftmax)
                .routerInFp32(routerDtype != null)
                .auxLossFree(expertBias)
                .biasUpdateRate(biasUpdateRate)
                .topKScalingFactor(topKScalingFactor == null ? 1 : topKScalingFactor)
                .zLossCoeff(zLossCoeff == null ? 0 : zLossCoeff)
                .inputJitter(inputJitterEps == null ? 0 : inputJitterEps)
                .sharedExpertFfnHiddenSize(sharedExpertFfnHiddenSize())
                .sharedExpertOverlap(sharedExpertOverlap)
                .capacityFactor(capacity())
                .padToCapacity(padToCapacity)
                .groupedGemm(groupedGemm)
                .permuteFusion(permuteFusion)
                .forceLoadBalancing(forceLoadBalancing)
                .dropPolicy(MoeConfig.DropPolicy.valueOf(dropPolicy.toUpperCase(Locale.ROOT)))
                .dispatcher(dispatcher == DispatcherKind.alltoall ? MoeConfig.Dispatcher.ALL_TO_ALL
                        : MoeConfig.Dispatcher.ALL_GATHER);
        if (groupTopK != null) {
            b.groupLimitedRouting(numGroups, groupTopK);
        }
        List<String> types = checkedLoadBalancingTypes();
        List<Double> coeffs = auxLossCoeffs();
        for (int i = 0; i < types.size(); i++) {
            double coeff = coeffs.isEmpty() ? 0 : coeffs.get(i);
            switch (types.get(i)) {
                case "aux_loss" -> b.auxLossCoeff(coeff);
                case "seq_aux_loss" -> b.seqAuxLossCoeff(coeff);
                case "global_aux_loss" -> b.globalAuxLossCoeff(coeff);
                default -> { } // none
            }
        }
        try {
            return new TransformerConfig.MoeSettings(layerPattern(), b.build());
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException("MoE flags: " + e.getMessage(), e);
        }
    }

    /** {@code --moe-expert-capacity-factor}, 0 when absent or negative (Megatron's "none"). */
    private double capacity() {
        return capacityFactor == null || capacityFactor < 0 ? 0 : capacityFactor;
    }

    /** @return the coefficients given, empty without the flag */
    private List<Double> auxLossCoeffs() {
        return auxLossCoeffs == null ? List.of() : auxLossCoeffs;
    }

    /** The balancing types, checked against the coefficients: one each, or one coefficient for one type. */
    private List<String> checkedLoadBalancingTypes() {
        List<String> types = loadBalancingTypes == null ? List.of("aux_loss") : loadBalancingTypes;
        Set<String> seen = new HashSet<>();
        for (String t : types) {
            if (!LOAD_BALANCING.contains(t)) {
                throw new IllegalArgumentException("--moe-router-load-balancing-type " + t + ": mcore4j implements"
                        + " aux_loss, seq_aux_loss, global_aux_loss and none");
            }
            if (!seen.add(t)) {
                throw new IllegalArgumentException("--moe-router-load-balancing-type " + String.join(" ", types)
                        + " names " + t + " twice");
            }
        }
        if (auxLossCoeffs != null && auxLossCoeffs.size() != types.size()) {
            throw new IllegalArgumentException("--moe-aux-loss-coeff gives " + auxLossCoeffs.size() + " coefficients for"
                    + " the " + types.size() + " types of --moe-router-load-balancing-type " + String.join(" ", types));
        }
        return types;
    }

    /**
     * Refuses MoE layers that a CUDA graph of the step cannot hold (with {@code --cuda-graph-impl local}), as
     * Megatron does: without {@code --moe-expert-capacity-factor} and {@code --moe-pad-expert-input-to-capacity} the
     * rows each expert receives follow the routing, and the host must read them before it can size the exchange;
     * the composed permutation reads the pairs' number too ({@code --moe-permute-fusion} does not); input jitter and
     * forced load balancing draw their noise on the host at each call, which a replay would repeat.
     *
     * @throws IllegalArgumentException naming the flag to give or drop
     */
    void checkCapturable() {
        String graph = "--cuda-graph-impl local with --num-experts " + numExperts;
        if (capacity() == 0 || !padToCapacity) {
            throw new IllegalArgumentException(graph + " needs --moe-expert-capacity-factor and"
                    + " --moe-pad-expert-input-to-capacity (as in Megatron): without them the rows each expert receives"
                    + " follow the routing, and the host reads them every step to size the exchange, which a CUDA graph"
                    + " cannot hold");
        }
        if (!permuteFusion) {
            throw new IllegalArgumentException(graph + " needs --moe-permute-fusion: the composed permutation reads"
                    + " its number of pairs on the host every step");
        }
        if (inputJitterEps != null && inputJitterEps > 0) {
            throw new IllegalArgumentException(graph + " does not take --moe-input-jitter-eps " + inputJitterEps
                    + ": the noise is drawn on the host at each call, and a replay would repeat the captured step's");
        }
        if (forceLoadBalancing) {
            throw new IllegalArgumentException(graph + " does not take --moe-router-force-load-balancing: its random"
                    + " logits are picked on the host at each call, and a replay would repeat the captured step's");
        }
    }
}
