package io.mcore4j.moe;

import io.mcore4j.core.autograd.NoGrad;
import io.mcore4j.core.autograd.Cast;
import io.mcore4j.core.Tensors;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
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
 * <p><b>Forced load balancing</b> ({@link MoeConfig#forceLoadBalancing()}, Megatron's benchmark-only
 * {@code --moe-router-force-load-balancing}): the gating linear's logits are replaced by random normal logits
 * before routing, as Megatron-Core's {@code apply_random_logits} does, and the gradient reaching the random logits
 * passes straight through to the real ones ({@code logits + stopGradient(random - logits)}). The random logits are
 * windows of a table of normal samples drawn once per rank and layer; each routing starts its window at a row drawn
 * from a replayable generator ({@link MoeLayer#randomState()}), so a recomputed layer routes as its first run did.
 *
 * <p><b>State.</b> Owns its weight, and with aux-loss-free balancing a float32 expert bias and a
 * token-count accumulator; with the global aux loss a count accumulator. Counts accumulate only in
 * scopes that record gradients, so the no-grad first run of a recomputed segment does not count
 * twice. Not thread-safe: one router per rank.
 */
public final class TopKRouter extends AbstractModule {
    private static final String LOAD_BALANCING_LOSS = "load_balancing_loss";
    private static final String SEQ_LOAD_BALANCING_LOSS = "seq_load_balancing_loss";
    private static final String GLOBAL_LOAD_BALANCING_LOSS = "global_load_balancing_loss";
    private static final String Z_LOSS = "z_loss";
    private static final MoeAuxLossTracker.Reduction LOAD_BALANCING_REDUCTION = MoeAuxLossTracker.Reduction.SUM_TP_CP;
    private static final MoeAuxLossTracker.Reduction GLOBAL_LOAD_BALANCING_REDUCTION =
            MoeAuxLossTracker.Reduction.SUM_TP_DP_CP;
    private static final MoeAuxLossTracker.Reduction Z_LOSS_REDUCTION = MoeAuxLossTracker.Reduction.AVERAGE_TP_DP_CP;
    private final MoeConfig config;
    /** The routing options of {@code config}, one object for the router's life (the one-call path keys on it). */
    private final TopKRouting.Options options;
    private final int hiddenSize;
    private final MoeGroups groups;
    private final AuxLossScale auxLossScale;
    private final Parameter weight;
    private final NDArray expertBias;
    private final NDArray localTokenCounts;
    private final NDArray globalTokenCounts;
    private final NDManager stateManager;
    private final DeterministicRandom jitter;
    private final DeterministicRandom balanceOffsets;
    private final long balanceTableSeed;
    private NDArray balanceTable;
    private int globalAuxLossSteps;
    private MoeAuxLossTracker tracker;
    private int layerNumber;
    private int numLayers;

    /** A router without forced load balancing's generators (which {@code config} must then leave off). */
    TopKRouter(MoeConfig config, int hiddenSize, MoeGroups groups, NDManager parameters, long initSeed,
               DeterministicRandom jitter, AuxLossScale auxLossScale) {
        this(config, hiddenSize, groups, parameters, initSeed, jitter, null, 0, auxLossScale);
    }

    TopKRouter(MoeConfig config, int hiddenSize, MoeGroups groups, NDManager parameters, long initSeed,
               DeterministicRandom jitter, DeterministicRandom balanceOffsets, long balanceTableSeed,
               AuxLossScale auxLossScale) {
        this.config = Objects.requireNonNull(config, "config");
        this.options = TopKRouting.Options.of(config);
        this.hiddenSize = hiddenSize;
        this.groups = groups;
        this.auxLossScale = Objects.requireNonNull(auxLossScale, "auxLossScale");
        this.jitter = jitter;
        if (config.forceLoadBalancing() && balanceOffsets == null) {
            throw new IllegalArgumentException("forced load balancing needs a generator for the random logits' offsets");
        }
        this.balanceOffsets = config.forceLoadBalancing() ? balanceOffsets : null;
        this.balanceTableSeed = balanceTableSeed;
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
        NDArray logits = gatingLogits(scope, tokens);
        if (balanceOffsets != null) {
            logits = randomLogits(logits, scope.manager());
        }
        return routeLogits(scope, logits, sequenceLength, batchSize);
    }

    /**
     * Forced load balancing: {@code logits + stopGradient(random - logits)}, whose value is the random logits (up to
     * the rounding of the logits' dtype) and whose gradient is the real logits'. The random {@code [T, E]} logits are
     * rows {@code [o, o + T)} of a {@code [2T, E]} table of standard normal samples (drawn once per token count and
     * dtype from the table's seed), {@code o} uniform in {@code [0, T]} from the replayable offset generator.
     */
    NDArray randomLogits(NDArray logits, NDManager m) {
        long rows = logits.getShape().get(0);
        long experts = logits.getShape().get(1);
        DataType dtype = DataTypes.of(logits); // DJL reads bfloat16 as UNKNOWN
        if (balanceTable == null || balanceTable.getShape().get(0) != 2 * rows || DataTypes.of(balanceTable) != dtype) {
            if (balanceTable != null) {
                balanceTable.close();
            }
            NDArray table = new DeterministicRandom(balanceTableSeed).normal(stateManager, new Shape(2 * rows, experts),
                    0, 1, dtype);
            table.attach(stateManager);
            balanceTable = table;
        }
        long offset = Long.remainderUnsigned(balanceOffsets.nextLong(), rows + 1);
        NDArray random = Tensors.own(Tensors.narrow(balanceTable, 0, offset, offset + rows), m);
        NDArray towardRandom = Tensors.own(random.sub(logits).stopGradient(), m);
        return Tensors.own(logits.add(towardRandom), m);
    }

    /**
     * Routes given gating logits as Megatron-Core's {@code TopKRouter.routing} does: z-loss (training),
     * top-k under the score function ({@link TopKRouting#select}), the capacity limit and padding
     * ({@link TokenDropping}), then the load-balancing losses (training), attached to the results through
     * {@link AuxLossAutoScaler} and recorded in the layer's {@link MoeAuxLossTracker} when one is set.
     *
     * @param scope the pass's scope; owns every result. With grad recorded, attaches the auxiliary
     *              losses and accumulates token counts
     * @param logits {@code [T, E]} with {@code T = s · b} in sequence-major order
     * @param sequenceLength the local sequence length {@code s} (for the per-sequence loss)
     * @param batchSize the micro-batch size {@code b}
     * @return the routing
     * @throws IllegalArgumentException if the logits' shape does not match
     */
    public Routing routeLogits(AutogradScope scope, NDArray logits, long sequenceLength, long batchSize) {
        Shape shape = logits.getShape();
        int experts = config.numExperts();
        if (shape.dimension() != 2 || shape.get(1) != experts || shape.get(0) != sequenceLength * batchSize) {
            throw new IllegalArgumentException("router: logits of shape " + shape + " must be [s * b = "
                    + sequenceLength + " * " + batchSize + ", " + experts + "]");
        }
        NDManager m = scope.manager();
        boolean training = scope.isGradEnabled();
        if (training && config.zLossCoeff() > 0) {
            double coeff = config.zLossCoeff() / groups.tpCpSize();
            NDArray z = LoadBalancingLoss.zLoss(logits, coeff, m);
            record(Z_LOSS, z, coeff, Z_LOSS_REDUCTION, m);
            logits = AuxLossAutoScaler.attach(scope, auxLossScale, logits, z);
        }
        long numTokens = shape.get(0);
        int k = config.topK();
        boolean aux = training
                && (config.auxLossCoeff() > 0 || config.seqAuxLossCoeff() > 0 || config.globalAuxLossCoeff() > 0);
        TopKRouting.Scored scored = TopKRouting.select(scope, logits, options, expertBias, aux);
        TopKRouting.Selection selection = scored.selection();
        NDArray selected = selection.routingMap();
        NDArray probs = selection.probs();
        NDArray kept = selected;
        NDArray dispatched = selected;
        long capacity = -1;
        if (config.hasCapacity()) {
            capacity = TokenDropping.capacity(numTokens, k, experts, config.capacityFactor());
            NDArray mask = TokenDropping.capacityMask(probs, selected, capacity, config.dropPolicy(), m);
            kept = Tensors.own(selected.mul(mask), m);
            dispatched = config.padToCapacity() ? mask : kept;
            probs = Tensors.own(probs.mul(DataTypes.toType(kept, DataTypes.of(probs), false)), m);
        }
        if (training) {
            probs = attachLoadBalancingLosses(scope, probs, scored, sequenceLength, batchSize);
            if (localTokenCounts != null) {
                localTokenCounts.addi(dispatched.sum(new int[] {0}));
            }
        }
        // without a capacity the map's ones are the top-k indices (the dispatch permutes by them)
        return new Routing(probs, dispatched, kept, k, capacity, capacity < 0 ? selection.indices() : null,
                capacity >= 0 && config.padToCapacity());
    }

    /**
     * Records this router's auxiliary losses (each divided by its coefficient, as Megatron logs them) in
     * {@code tracker} from now on, under layer {@code layerNumber} of {@code numLayers}.
     *
     * @param tracker the rank's tracker, or null to stop recording
     * @param layerNumber this layer's 1-based number in the model
     * @param numLayers layers of the model
     * @throws IllegalArgumentException if the layer number is not in {@code [1, numLayers]}
     */
    public void trackAuxLosses(MoeAuxLossTracker tracker, int layerNumber, int numLayers) {
        if (tracker != null && (layerNumber < 1 || layerNumber > numLayers)) {
            throw new IllegalArgumentException("layer number " + layerNumber + " must be in [1, " + numLayers + "]");
        }
        this.tracker = tracker;
        this.layerNumber = layerNumber;
        this.numLayers = numLayers;
    }

    /**
     * Declares in {@code tracker} every auxiliary loss that routers of {@code config} record (Megatron's names:
     * {@code load_balancing_loss}, {@code seq_load_balancing_loss}, {@code global_load_balancing_loss},
     * {@code z_loss}), so that a rank whose stage has no MoE layer reports the same losses
     * ({@link MoeAuxLossTracker#expect}).
     *
     * @param tracker the rank's tracker
     * @param config the MoE layers' options
     * @param numLayers layers of the model
     */
    public static void expectAuxLosses(MoeAuxLossTracker tracker, MoeConfig config, int numLayers) {
        if (config.auxLossCoeff() > 0) {
            tracker.expect(LOAD_BALANCING_LOSS, numLayers, LOAD_BALANCING_REDUCTION);
        }
        if (config.seqAuxLossCoeff() > 0) {
            tracker.expect(SEQ_LOAD_BALANCING_LOSS, numLayers, LOAD_BALANCING_REDUCTION);
        }
        if (config.globalAuxLossCoeff() > 0) {
            tracker.expect(GLOBAL_LOAD_BALANCING_LOSS, numLayers, GLOBAL_LOAD_BALANCING_REDUCTION);
        }
        if (config.zLossCoeff() > 0) {
            tracker.expect(Z_LOSS, numLayers, Z_LOSS_REDUCTION);
        }
    }

    /** Records {@code loss / coeff} under {@code name} when a tracker is attached. */
    private void record(String name, NDArray loss, double coeff, MoeAuxLossTracker.Reduction reduction, NDManager m) {
        if (tracker != null) {
            tracker.record(name, layerNumber, numLayers, Tensors.scale(loss, 1.0 / coeff, m), reduction);
        }
    }

    /** The gating linear, with input jitter, in float32 when configured. */
    private NDArray gatingLogits(AutogradScope scope, NDArray tokens) {
        NDManager m = scope.manager();
        NDArray x = tokens;
        if (jitter != null) {
            double eps = config.inputJitter();
            NDArray noise = Tensors.own(jitter.uniform(m, x.getShape(), DataTypes.of(x)).mul(2 * eps).add(1 - eps), m);
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
     * Adds every enabled load-balancing loss and attaches their sum to {@code probs}; the scores and their plain
     * top-k map (no bias, no capacity), which decides the counts, come with the selection when a loss is enabled.
     */
    private NDArray attachLoadBalancingLosses(AutogradScope scope, NDArray probs, TopKRouting.Scored scored, long seq,
                                              long batch) {
        if (scored.auxScores() == null) {
            return probs;
        }
        NDManager m = scope.manager();
        int k = config.topK();
        int experts = config.numExperts();
        NDArray scores = scored.auxScores();
        NDArray selected = scored.auxMap();
        long tokens = scores.getShape().get(0);
        NDArray total = null;
        if (config.auxLossCoeff() > 0) {
            NDArray counts = groups.allReduceTpCp(Tensors.own(selected.sum(new int[] {0}), m), m);
            NDArray loss = LoadBalancingLoss.switchLoss(scores, counts, (double) tokens * groups.tpCpSize(),
                    k, experts, config.auxLossCoeff(), m);
            record(LOAD_BALANCING_LOSS, loss, config.auxLossCoeff(), LOAD_BALANCING_REDUCTION, m);
            total = plus(m, total, loss);
        }
        if (config.seqAuxLossCoeff() > 0) {
            // fold the batch into the expert dim: each (sequence, expert) pair is balanced on its own
            NDArray perSequenceScores = Tensors.own(scores.reshape(seq, batch * experts), m);
            NDArray perSequenceSelected = Tensors.own(selected.reshape(seq, batch * experts), m);
            NDArray counts = groups.allReduceTpCp(Tensors.own(perSequenceSelected.sum(new int[] {0}), m), m);
            NDArray loss = LoadBalancingLoss.switchLoss(perSequenceScores, counts, (double) seq * groups.tpCpSize(), k,
                    experts, config.seqAuxLossCoeff(), m);
            NDArray perBatch = Tensors.scale(loss, 1.0 / batch, m);
            record(SEQ_LOAD_BALANCING_LOSS, perBatch, config.seqAuxLossCoeff(), LOAD_BALANCING_REDUCTION, m);
            total = plus(m, total, perBatch);
        }
        if (config.globalAuxLossCoeff() > 0) {
            NDArray counts = groups.allReduceTpDpCp(Tensors.own(selected.sum(new int[] {0}), m), m);
            globalTokenCounts.addi(counts);
            globalAuxLossSteps++;
            NDArray averaged = Tensors.own(globalTokenCounts.div(Tensors.hostScalar(globalAuxLossSteps, globalTokenCounts,
                    m)), m);
            NDArray loss = LoadBalancingLoss.switchLoss(scores, averaged, (double) tokens * groups.tpDpCpSize(),
                    k, experts, config.globalAuxLossCoeff(), m);
            record(GLOBAL_LOAD_BALANCING_LOSS, loss, config.globalAuxLossCoeff(), GLOBAL_LOAD_BALANCING_REDUCTION, m);
            total = plus(m, total, loss);
        }
        return AuxLossAutoScaler.attach(scope, auxLossScale, probs, total);
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
