package io.mcore4j.moe;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDArrays;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import ai.djl.nn.Activation;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.autograd.Cast;
import io.mcore4j.core.autograd.NoGrad;

/**
 * Megatron-Core's top-k routing functions ({@code topk_routing_with_score_function} and
 * {@code compute_routing_scores_for_aux_loss} of {@code moe_utils}) on given logits, without a router
 * module: {@link TopKRouter} routes with them, and callers may route their own logits the same way.
 * Capacity and padding are in {@link TokenDropping}, the losses in {@link LoadBalancingLoss}.
 *
 * <p>Precision follows Megatron: scores are computed in float32 and the probabilities are returned in the
 * logits' dtype. The top-k is libtorch's sorted top-k (Megatron's choice while gradients are recorded), so
 * ties resolve as in Megatron's training step.
 *
 * <p>Two implementations of {@link #select(AutogradScope, NDArray, Options, NDArray)} compute the same selection,
 * chosen there: routing without expert groups of logits in a lower precision than float32 runs one TorchScript call
 * ({@code topk_routing.pt}, written by {@code scripts/make_topk_routing_module.py}) with the casts to and from
 * float32 inside; float32 logits and group-limited routing run the composed path, DJL's ops one call each, against
 * which the fused one is tested.
 */
public final class TopKRouting {
    private TopKRouting() {}

    /**
     * The experts chosen for each token and their weights.
     *
     * @param indices {@code [T, k]} int64 expert indices
     * @param topProbs {@code [T, k]} their routing probabilities, in the logits' dtype
     * @param probs {@code [T, E]} the same probabilities scattered over all experts (0 elsewhere)
     * @param routingMap {@code [T, E]} float32 0/1: 1 where an expert was chosen
     */
    public record Selection(NDArray indices, NDArray topProbs, NDArray probs, NDArray routingMap) {}

    /**
     * How {@link #select} chooses: Megatron-Core's arguments of {@code topk_routing_with_score_function}.
     *
     * @param topK experts per token, at least 1
     * @param score the score function
     * @param preSoftmax softmax before the top-k (softmax scores only)
     * @param numGroups equal expert groups for group-limited routing, 0 = none
     * @param groupTopK groups each token chooses from, 0 = none
     * @param scalingFactor factor on the chosen probabilities (1 = none)
     */
    public record Options(int topK, MoeConfig.RouterScore score, boolean preSoftmax, int numGroups, int groupTopK,
                          double scalingFactor) {
        /**
         * @param config a layer's options
         * @return the routing options of {@code config}
         */
        public static Options of(MoeConfig config) {
            return new Options(config.topK(), config.routerScore(), config.preSoftmax(), config.numGroups(),
                    config.groupTopK(), config.topKScalingFactor());
        }
    }

    /**
     * Top-k selection under a score function without groups or scaling; see {@link #select(AutogradScope, NDArray,
     * Options, NDArray)}.
     *
     * @param scope the pass's scope; owns every result (records gradients to the logits when it does)
     * @param logits {@code [T, E]}
     * @param topK experts per token, in {@code [1, E]}
     * @param score the score function
     * @param preSoftmax softmax before the top-k (softmax scores only)
     * @param expertBias float32 {@code [E]} added to the scores for the choice, or null
     * @return the selection
     * @throws IllegalArgumentException if the logits are not 2-D or {@code topK} is out of range
     */
    public static Selection select(AutogradScope scope, NDArray logits, int topK, MoeConfig.RouterScore score,
                                   boolean preSoftmax, NDArray expertBias) {
        return select(scope, logits, new Options(topK, score, preSoftmax, 0, 0, 1), expertBias);
    }

    /**
     * Top-k selection under a score function: softmax of the top-k logits, softmax over all experts before
     * the top-k ({@code preSoftmax}), or sigmoid scores normalized over the top-k when {@code k > 1}. The
     * expert bias of aux-loss-free balancing, when given, is added to the scores for the choice only. With
     * groups, each token first keeps the {@code groupTopK} groups whose {@code topK / groupTopK} best selection
     * scores sum highest and chooses its experts among theirs (Megatron-Core's {@code group_limited_topk}). The
     * chosen probabilities are finally multiplied by the scaling factor.
     *
     * @param scope the pass's scope; owns every result (records gradients to the logits when it does)
     * @param logits {@code [T, E]}
     * @param options how to choose
     * @param expertBias float32 {@code [E]} added to the scores for the choice, or null
     * @return the selection
     * @throws IllegalArgumentException if the logits are not 2-D, {@code topK} is out of range or the groups do not
     *         divide the experts
     */
    public static Selection select(AutogradScope scope, NDArray logits, Options options, NDArray expertBias) {
        int topK = options.topK();
        if (logits.getShape().dimension() != 2 || topK < 1 || topK > logits.getShape().get(1)
                || options.numGroups() > 0 && logits.getShape().get(1) % options.numGroups() != 0) {
            throw new IllegalArgumentException("top-" + topK + " routing of logits " + logits.getShape() + " in "
                    + options.numGroups() + " groups: expected [tokens, experts] logits, 1 <= k <= experts and groups"
                    + " dividing the experts");
        }
        return select(scope, logits, options, expertBias, false).selection();
    }

    /**
     * A selection and, when asked, the scores and top-k map the load-balancing losses use.
     *
     * @param selection the selection
     * @param auxScores {@code [T, E]} float32 scores of {@link #scoresForAuxLoss}, or null when not asked
     * @param auxMap {@code [T, E]} float32 0/1 map of {@link #routingMapForAuxLoss}, or null when not asked
     */
    record Scored(Selection selection, NDArray auxScores, NDArray auxMap) {}

    /**
     * {@link #select(AutogradScope, NDArray, Options, NDArray)}, and with {@code aux} the load-balancing scores of the
     * same logits and their top-k map. Chooses the implementation: one TorchScript call ({@link #selectFused}) for
     * routing without groups of logits in a lower precision than float32, else the composed ops.
     *
     * @param scope the pass's scope; owns every result
     * @param logits {@code [T, E]}, checked by the caller
     * @param options how to choose, checked by the caller
     * @param expertBias float32 {@code [E]} added to the scores for the choice, or null
     * @param aux whether to compute the load-balancing scores and map too
     * @return the selection and, with {@code aux}, the scores and map
     */
    static Scored select(AutogradScope scope, NDArray logits, Options options, NDArray expertBias, boolean aux) {
        // the one call pays where it removes the Cast Functions of lower-precision logits (a bf16 router's forward
        // and backward: 0.14 ms against 0.56 ms on a CPU); for float32 logits the composed ops are as quick
        // (MoeLayerOpCount)
        if (options.numGroups() == 0 && logits.getDataType() != DataType.FLOAT32) {
            return selectFused(scope, logits, options, expertBias, aux);
        }
        Selection selection = selectComposed(scope, logits, options, expertBias);
        if (!aux) {
            return new Scored(selection, null, null);
        }
        NDArray scores = scoresForAuxLoss(scope, logits, options.score());
        return new Scored(selection, scores, routingMapForAuxLoss(scope.manager(), scores, options.topK()));
    }

    /**
     * {@link #select(AutogradScope, NDArray, Options, NDArray, boolean)} in one TorchScript call, for options without
     * groups: the same ops as {@link #selectComposed} (and {@link #scoresForAuxLoss}, {@link #routingMapForAuxLoss})
     * with the casts between the logits' dtype and float32 inside. Arguments as {@code select}'s, already checked.
     */
    static Scored selectFused(AutogradScope scope, NDArray logits, Options options, NDArray expertBias, boolean aux) {
        return Fused.INSTANCE.select(scope, logits, options, expertBias, aux);
    }

    /**
     * {@link #select(AutogradScope, NDArray, Options, NDArray)} from DJL's ops, one libtorch call each (with casts
     * between the logits' dtype and float32 as {@link Cast} Functions): the definition the fused path is tested
     * against, and the path of group-limited routing. Arguments as {@code select}'s, already checked.
     */
    static Selection selectComposed(AutogradScope scope, NDArray logits, Options options, NDArray expertBias) {
        int topK = options.topK();
        NDManager m = scope.manager();
        DataType dtype = DataTypes.of(logits);
        NDArray indices;
        NDArray probs;
        if (options.score() == MoeConfig.RouterScore.SIGMOID) {
            NDArray scores = Tensors.own(Activation.sigmoid(Cast.apply(scope, logits, DataType.FLOAT32)), m);
            indices = topIndices(m, withBias(m, scores, expertBias), options);
            NDArray chosen = Tensors.own(scores.gather(indices, 1), m);
            probs = topK > 1 ? normalized(chosen, m) : chosen;
        } else if (options.preSoftmax()) {
            NDArray scores = softmax(scope, logits);
            indices = topIndices(m, withBias(m, scores, expertBias), options);
            probs = Tensors.own(scores.gather(indices, 1), m);
        } else {
            indices = topIndices(m, withBias(m, logits, expertBias), options);
            probs = softmax(scope, Tensors.own(logits.gather(indices, 1), m));
        }
        if (options.scalingFactor() != 1) {
            probs = Tensors.scale(probs, options.scalingFactor(), m);
        }
        probs = Cast.apply(scope, probs, dtype);
        int experts = (int) logits.getShape().get(1);
        // each token's k (distinct) experts scattered into [T, E]: no [T, k, E] one-hot, and the probabilities'
        // gradient is a gather
        NDArray routingMap = ones(m, indices, experts);
        NDArray scattered = Tensors.own(DataTypes.zeros(m, new Shape(indices.getShape().get(0), experts), dtype)
                .scatter(indices, probs, 1), m);
        return new Selection(indices, probs, scattered, routingMap);
    }

    /**
     * The scores the load-balancing losses use: softmax over all experts, or sigmoid scores normalized over
     * all experts, in float32 ({@code compute_routing_scores_for_aux_loss}).
     *
     * @param scope the pass's scope; owns the result
     * @param logits {@code [T, E]}
     * @param score the score function
     * @return {@code [T, E]} float32 scores
     */
    public static NDArray scoresForAuxLoss(AutogradScope scope, NDArray logits, MoeConfig.RouterScore score) {
        NDManager m = scope.manager();
        if (score == MoeConfig.RouterScore.SOFTMAX) {
            return softmax(scope, logits);
        }
        return normalized(Tensors.own(Activation.sigmoid(Cast.apply(scope, logits, DataType.FLOAT32)), m), m);
    }

    /**
     * {@code s / (Σ_row s + 1e-20)}, the epsilon a host scalar (a Java number would be a tensor copied from the host,
     * which a CUDA graph cannot hold).
     */
    private static NDArray normalized(NDArray s, NDManager m) {
        NDArray sums = Tensors.own(s.sum(new int[] {1}, true), m);
        return Tensors.own(s.div(Tensors.own(sums.add(Tensors.hostScalar(1e-20, sums, m)), m)), m);
    }

    /**
     * The 0/1 top-k map of the plain scores (no bias, no capacity), which the load-balancing losses count.
     *
     * @param m owner of the result
     * @param scores {@code [T, E]} scores from {@link #scoresForAuxLoss}
     * @param topK experts per token
     * @return {@code [T, E]} float32 0/1
     */
    public static NDArray routingMapForAuxLoss(NDManager m, NDArray scores, int topK) {
        return ones(m, topIndices(m, scores, topK), (int) scores.getShape().get(1));
    }

    /** The float32 {@code [T, E]} 0/1 map with a one at each token's {@code [T, k]} (distinct) expert indices. */
    private static NDArray ones(NDManager m, NDArray indices, int experts) {
        try (NDManager temp = m.newSubManager()) {
            NDArray one = Tensors.own(temp.ones(indices.getShape(), DataType.FLOAT32), temp);
            NDArray zeros = Tensors.own(temp.zeros(new Shape(indices.getShape().get(0), experts), DataType.FLOAT32), temp);
            return Tensors.own(zeros.scatter(indices, one, 1), m);
        }
    }

    private static NDArray withBias(NDManager m, NDArray scores, NDArray expertBias) {
        if (expertBias == null) {
            return scores;
        }
        return Tensors.own(DataTypes.toType(scores.stopGradient(), DataType.FLOAT32, false).add(expertBias), m);
    }

    /** The top-k indices of {@code scores}, among the experts of each token's best groups when routing is group-limited. */
    private static NDArray topIndices(NDManager m, NDArray scores, Options options) {
        if (options.groupTopK() == 0) {
            return topIndices(m, scores, options.topK());
        }
        NDManager temp = m.newSubManager();
        try (NoGrad ignored = NoGrad.enter()) {
            long tokens = scores.getShape().get(0);
            long experts = scores.getShape().get(1);
            int groups = options.numGroups();
            NDArray grouped = scores.stopGradient().reshape(tokens, groups, experts / groups);
            grouped.attach(temp);
            NDList best = grouped.topK(options.topK() / options.groupTopK(), -1, true, true);
            best.attach(temp);
            NDArray groupScores = Tensors.own(best.get(0).sum(new int[] {2}), temp); // [T, G]
            NDList chosenGroups = groupScores.topK(options.groupTopK(), -1, true, false);
            chosenGroups.attach(temp);
            NDArray groupMask = Tensors.own(chosenGroups.get(1).oneHot(groups).sum(new int[] {1}), temp); // [T, G]
            NDArray expertMask = Tensors.own(groupMask.expandDims(2).broadcast(new Shape(tokens, groups, experts / groups))
                    .reshape(tokens, experts).toType(DataType.BOOLEAN, false), temp);
            NDArray excluded = temp.full(new Shape(tokens, experts), Float.NEGATIVE_INFINITY, DataTypes.of(scores));
            NDArray masked = Tensors.own(NDArrays.where(expertMask, scores.stopGradient(), excluded), temp);
            NDArray indices = topIndices(temp, masked, options.topK());
            indices.attach(m);
            return indices;
        } finally {
            temp.close();
        }
    }

    private static NDArray topIndices(NDManager m, NDArray scores, int k) {
        NDList top = scores.topK(k, 1, true, true);
        top.attach(m);
        return top.get(1);
    }

    /** The one-call path of routing without groups, made on first use and shared by the process. */
    private static final class Fused {
        static final FusedTopKRouting INSTANCE = new FusedTopKRouting();
    }

    /** Softmax over the last dim computed in float32. */
    private static NDArray softmax(AutogradScope scope, NDArray x) {
        return Tensors.own(Cast.apply(scope, x, DataType.FLOAT32).softmax(-1), scope.manager());
    }
}
