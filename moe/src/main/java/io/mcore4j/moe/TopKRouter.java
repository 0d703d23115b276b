package io.mcore4j.moe;

import io.mcore4j.core.autograd.NoGrad;
import io.mcore4j.core.autograd.Cast;
import io.mcore4j.core.Tensors;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import ai.djl.nn.Activation;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.nn.AbstractModule;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.random.DeterministicRandom;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.tensorparallel.Initializers;

import java.util.ArrayList;
import java.util.List;
import java.util.Objects;

/**
 * Routes each token to its top-k experts (Megatron-Core's {@code TopKRouter}): a gating linear
 * {@code [E, h]} (optionally in float32), a score function, top-k selection (with the expert bias
 * of aux-loss-free balancing added for selection only), the capacity limit, and the auxiliary losses
 * attached to the probabilities through {@link AuxLossAutoScaler}.
 *
 * <p><b>Tokens and groups.</b> The router sees this rank's tokens; with tensor parallelism the
 * layer hands it the rank's sequence chunk, so its weight's gradient is partial per TP rank
 * ({@link Parameter.Kind#SEQUENCE_PARALLEL} whenever the TP size is above 1, summed over TP by the
 * optimizer; {@link Parameter.Kind#DENSE} otherwise). Load-balancing counts are summed over TP x CP
 * ({@code aux_loss}, {@code seq_aux_loss}) or TP x DP x CP ({@code global_aux_loss}, expert bias);
 * those all-reduces run on every rank of the group in the same order.
 *
 * <p><b>State.</b> Owns its weight, and with aux-loss-free balancing a float32 expert bias and a
 * token-count accumulator; with the global aux loss a count accumulator. Counts accumulate only in
 * scopes that record gradients, so the no-grad first run of a recomputed segment does not count
 * twice. Not thread-safe: one router per rank.
 */
public final class TopKRouter extends AbstractModule {
    private final MoeConfig config;
    private final int hiddenSize;
    private final MoeGroups groups;
    private final AuxLossScale auxLossScale;
    private final Parameter weight;
    private final NDArray expertBias;
    private final NDArray localTokenCounts;
    private final NDArray globalTokenCounts;
    private final NDManager stateManager;
    private final DeterministicRandom jitter;
    private int globalAuxLossSteps;

    TopKRouter(MoeConfig config, int hiddenSize, MoeGroups groups, NDManager parameters, long initSeed,
               DeterministicRandom jitter, AuxLossScale auxLossScale) {
        this.config = Objects.requireNonNull(config, "config");
        this.hiddenSize = hiddenSize;
        this.groups = groups;
        this.auxLossScale = Objects.requireNonNull(auxLossScale, "auxLossScale");
        this.jitter = jitter;
        int experts = config.numExperts();
        NDArray w = Initializers.normal(config.initStd(), initSeed).create(parameters, new Shape(experts, hiddenSize),
                config.dtype());
        // the copies are identical over TP, DP and CP: only the rank with TP, DP and CP rank 0 writes it
        boolean replica = groups.tp().rank() != 0 || groups.isDenseDataParallelReplica();
        this.weight = registerParameter("", new Parameter("weight", w, Parameter.Partition.NONE,
                groups.tp().size() > 1 ? Parameter.Kind.SEQUENCE_PARALLEL : Parameter.Kind.DENSE), replica ? 1 : 0);
        this.stateManager = parameters.newSubManager();
        this.expertBias = config.auxLossFree() ? stateManager.zeros(new Shape(experts), DataType.FLOAT32) : null;
        this.localTokenCounts = config.auxLossFree() ? stateManager.zeros(new Shape(experts), DataType.FLOAT32) : null;
        this.globalTokenCounts = config.globalAuxLossCoeff() > 0
                ? stateManager.zeros(new Shape(experts), DataType.FLOAT32) : null;
    }

    /**
     * Routes this rank's tokens.
     *
     * @param scope the pass's scope; owns every result. With grad recorded, attaches the auxiliary
     *              losses and accumulates token counts
     * @param tokens {@code [T, h]} with {@code T = s · b} in sequence-major order
     * @param sequenceLength the local sequence length {@code s} (for the per-sequence loss)
     * @param batchSize the micro-batch size {@code b}
     * @return the routing
     * @throws IllegalArgumentException if the tokens' shape does not match
     */
    public Routing route(AutogradScope scope, NDArray tokens, long sequenceLength, long batchSize) {
        Shape shape = tokens.getShape();
        if (shape.dimension() != 2 || shape.get(1) != hiddenSize || shape.get(0) != sequenceLength * batchSize) {
            throw new IllegalArgumentException("router: tokens of shape " + shape + " must be [s * b = "
                    + sequenceLength + " * " + batchSize + ", " + hiddenSize + "]");
        }
        NDManager m = scope.manager();
        NDArray logits = gatingLogits(scope, tokens);
        boolean training = scope.isGradEnabled();
        if (training && config.zLossCoeff() > 0) {
            NDArray z = LoadBalancingLoss.zLoss(logits, config.zLossCoeff() / groups.tpCpSize(), m);
            logits = AuxLossAutoScaler.attach(scope, auxLossScale, logits, z);
        }
        long numTokens = shape.get(0);
        int k = config.topK();
        int experts = config.numExperts();
        NDArray[] selection = select(scope, logits);
        NDArray oneHot = Tensors.own(selection[0].oneHot(experts), m); // [T, k, E]
        NDArray selected = Tensors.own(oneHot.sum(new int[] {1}), m);
        NDArray probs = Tensors.own(oneHot.toType(selection[1].getDataType(), false)
                .mul(selection[1].expandDims(2)).sum(new int[] {1}), m);
        NDArray kept = selected;
        NDArray dispatched = selected;
        long capacity = -1;
        if (config.hasCapacity()) {
            capacity = TokenDropping.capacity(numTokens, k, experts, config.capacityFactor());
            kept = TokenDropping.keep(selected, probs, capacity, config.dropPolicy(), m);
            dispatched = config.padToCapacity() ? TokenDropping.padToCapacity(kept, capacity, m) : kept;
            if (kept != selected) {
                probs = Tensors.own(probs.mul(kept.toType(probs.getDataType(), false)), m);
            }
        }
        if (training) {
            probs = attachLoadBalancingLosses(scope, probs, logits, sequenceLength, batchSize);
            if (localTokenCounts != null) {
                localTokenCounts.addi(dispatched.sum(new int[] {0}));
            }
        }
        return new Routing(probs, dispatched, kept, k, capacity);
    }

    /** The gating linear, with input jitter, in float32 when configured. */
    private NDArray gatingLogits(AutogradScope scope, NDArray tokens) {
        NDManager m = scope.manager();
        NDArray x = tokens;
        if (jitter != null) {
            double eps = config.inputJitter();
            NDArray noise = Tensors.own(jitter.uniform(m, x.getShape(), x.getDataType()).mul(2 * eps).add(1 - eps), m);
            x = Tensors.own(x.mul(noise), m);
        }
        NDArray w = weight.data();
        if (config.routerInFp32()) {
            x = Cast.apply(scope, x, DataType.FLOAT32);
            w = Cast.apply(scope, w, DataType.FLOAT32);
        }
        return Tensors.linear(x, w, null, m);
    }

    /**
     * Top-k selection under the score function.
     *
     * @return {selected expert indices [T, k] int64, their probabilities [T, k] in the logits' dtype}
     */
    private NDArray[] select(AutogradScope scope, NDArray logits) {
        NDManager m = scope.manager();
        int k = config.topK();
        DataType dtype = logits.getDataType();
        NDArray indices;
        NDArray probs;
        if (config.routerScore() == MoeConfig.RouterScore.SIGMOID) {
            NDArray scores = Tensors.own(Activation.sigmoid(Cast.apply(scope, logits, DataType.FLOAT32)), m);
            indices = topIndices(m, withBias(m, scores), k);
            NDArray chosen = Tensors.own(scores.gather(indices, 1), m);
            probs = k > 1 ? Tensors.own(chosen.div(chosen.sum(new int[] {1}, true).add(1e-20)), m) : chosen;
        } else if (config.preSoftmax()) {
            NDArray scores = softmax(scope, logits);
            indices = topIndices(m, withBias(m, scores), k);
            probs = Tensors.own(scores.gather(indices, 1), m);
        } else {
            indices = topIndices(m, withBias(m, logits), k);
            probs = softmax(scope, Tensors.own(logits.gather(indices, 1), m));
        }
        return new NDArray[] {indices, Cast.apply(scope, probs, dtype)};
    }

    private NDArray withBias(NDManager m, NDArray scores) {
        if (expertBias == null) {
            return scores;
        }
        return Tensors.own(scores.stopGradient().toType(DataType.FLOAT32, false).add(expertBias), m);
    }

    private static NDArray topIndices(NDManager m, NDArray scores, int k) {
        NDList top = scores.topK(k, 1, true, true);
        top.attach(m);
        return top.get(1);
    }

    /** Softmax over the last dim computed in float32. */
    private static NDArray softmax(AutogradScope scope, NDArray x) {
        return Tensors.own(Cast.apply(scope, x, DataType.FLOAT32).softmax(-1), scope.manager());
    }

    /** Adds every enabled load-balancing loss and attaches their sum to {@code probs}. */
    private NDArray attachLoadBalancingLosses(AutogradScope scope, NDArray probs, NDArray logits, long seq, long batch) {
        boolean any = config.auxLossCoeff() > 0 || config.seqAuxLossCoeff() > 0 || config.globalAuxLossCoeff() > 0;
        if (!any) {
            return probs;
        }
        NDManager m = scope.manager();
        int k = config.topK();
        int experts = config.numExperts();
        NDArray scores = scoresForAuxLoss(scope, logits);
        // the top-k of the plain scores (no bias, no capacity) decides the counts
        NDArray selected = Tensors.own(topIndices(m, scores, k).oneHot(experts).sum(new int[] {1}), m);
        long tokens = scores.getShape().get(0);
        NDArray total = null;
        if (config.auxLossCoeff() > 0) {
            NDArray counts = groups.allReduceTpCp(Tensors.own(selected.sum(new int[] {0}), m), m);
            total = plus(m, total, LoadBalancingLoss.switchLoss(scores, counts, (double) tokens * groups.tpCpSize(),
                    k, experts, config.auxLossCoeff(), m));
        }
        if (config.seqAuxLossCoeff() > 0) {
            // fold the batch into the expert dim: each (sequence, expert) pair is balanced on its own
            NDArray perSequenceScores = Tensors.own(scores.reshape(seq, batch * experts), m);
            NDArray perSequenceSelected = Tensors.own(selected.reshape(seq, batch * experts), m);
            NDArray counts = groups.allReduceTpCp(Tensors.own(perSequenceSelected.sum(new int[] {0}), m), m);
            NDArray loss = LoadBalancingLoss.switchLoss(perSequenceScores, counts, (double) seq * groups.tpCpSize(), k,
                    experts, config.seqAuxLossCoeff(), m);
            total = plus(m, total, Tensors.scale(loss, 1.0 / batch, m));
        }
        if (config.globalAuxLossCoeff() > 0) {
            NDArray counts = groups.allReduceTpDpCp(Tensors.own(selected.sum(new int[] {0}), m), m);
            globalTokenCounts.addi(counts);
            globalAuxLossSteps++;
            NDArray averaged = Tensors.own(globalTokenCounts.div(globalAuxLossSteps), m);
            total = plus(m, total, LoadBalancingLoss.switchLoss(scores, averaged, (double) tokens * groups.tpDpCpSize(),
                    k, experts, config.globalAuxLossCoeff(), m));
        }
        return AuxLossAutoScaler.attach(scope, auxLossScale, probs, total);
    }

    /** Softmax over all experts, or sigmoid normalised over all experts, in float32. */
    private NDArray scoresForAuxLoss(AutogradScope scope, NDArray logits) {
        NDManager m = scope.manager();
        if (config.routerScore() == MoeConfig.RouterScore.SOFTMAX) {
            return softmax(scope, logits);
        }
        NDArray s = Tensors.own(Activation.sigmoid(Cast.apply(scope, logits, DataType.FLOAT32)), m);
        return Tensors.own(s.div(s.sum(new int[] {1}, true).add(1e-20)), m);
    }

    private static NDArray plus(NDManager m, NDArray total, NDArray term) {
        return total == null ? term : Tensors.own(total.add(term), m);
    }

    /**
     * Aux-loss-free balancing step (Megatron-Core's expert-bias update, called where it finalises
     * gradients, once per step before the optimizer): sums the token counts accumulated since the
     * last call over TP x DP x CP, moves each expert's bias by {@code rate · sign(mean - count)}
     * (so under-loaded experts become more attractive) and clears the counts. A no-op without
     * aux-loss-free balancing. Collective: every rank of the TP x DP x CP group must call it.
     */
    public void updateExpertBias() {
        if (expertBias == null) {
            return;
        }
        try (NDManager temp = stateManager.newSubManager(); NoGrad ignored = NoGrad.enter()) {
            NDArray counts = groups.allReduceTpDpCp(Tensors.own(localTokenCounts.duplicate(), temp), temp);
            NDArray offset = Tensors.own(counts.mean().sub(counts), temp);
            expertBias.addi(Tensors.own(offset.sign().mul(config.biasUpdateRate()), temp));
            localTokenCounts.muli(0);
        }
    }

    /** Clears the counts the global aux loss averages over (call once per step, after the last micro-batch). */
    public void resetGlobalAuxLossTracker() {
        if (globalTokenCounts != null) {
            globalTokenCounts.muli(0);
        }
        globalAuxLossSteps = 0;
    }

    /** @return the gating weight {@code [E, h]} */
    public Parameter weight() {
        return weight;
    }

    /**
     * The expert bias of aux-loss-free balancing.
     *
     * @return the live float32 {@code [E]} tensor (updated in place), or null when disabled
     */
    public NDArray expertBias() {
        return expertBias;
    }

    /**
     * Token counts per expert accumulated for the next {@link #updateExpertBias()}.
     *
     * @return the live float32 {@code [E]} tensor, or null when aux-loss-free balancing is off
     */
    public NDArray localTokenCounts() {
        return localTokenCounts;
    }

    /**
     * The weight (and the expert bias) under {@code prefix + "weight"} ({@code "expert_bias"}); the
     * copies are identical over TP, DP and CP, so only the rank with TP, DP and CP rank 0 holds the
     * main replica.
     */
    @Override
    public List<ShardedTensor> shardedState(String prefix) {
        List<ShardedTensor> out = new ArrayList<>(super.shardedState(prefix));
        if (expertBias != null) {
            boolean replica = groups.tp().rank() != 0 || groups.isDenseDataParallelReplica();
            out.add(ShardedTensor.whole(prefix + "expert_bias", expertBias).replicatedIf(replica));
        }
        return out;
    }

    /** Closes the weight and the router's state tensors. */
    @Override
    public void close() {
        super.close();
        stateManager.close();
    }

    @Override
    public String toString() {
        return "TopKRouter{" + config.numExperts() + " experts, top-" + config.topK() + ", " + config.routerScore()
                + (config.preSoftmax() ? " (pre-softmax)" : "") + ", hidden " + hiddenSize + "}";
    }
}
