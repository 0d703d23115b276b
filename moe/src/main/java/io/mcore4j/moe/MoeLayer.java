package io.mcore4j.moe;

import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.Cast;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.autograd.Recompute;
import io.mcore4j.core.nn.AbstractModule;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.nn.UnaryModule;
import io.mcore4j.core.random.DeterministicRandom;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.tensorparallel.ColumnParallelLinear;
import io.mcore4j.tensorparallel.Initializers;
import io.mcore4j.tensorparallel.Mappings;
import io.mcore4j.tensorparallel.ParallelMlp;
import io.mcore4j.tensorparallel.RowParallelLinear;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.util.List;
import java.util.Objects;

/**
 * A mixture-of-experts layer (Megatron-Core's {@code MoELayer}), a drop-in replacement for the dense
 * MLP of a transformer layer: {@link TopKRouter} → token dispatch → {@code E / EP} local expert MLPs
 * → combine, plus an optional shared expert whose forward runs beside the dispatch: while the host waits for the
 * dispatch's counts, or with {@link MoeConfig#sharedExpertOverlap()} while its all-to-all travels (the same results
 * either way up to the order in which backward sums gradients).
 *
 * <p><b>Layout.</b> Attention runs over TP x CP x DP x PP and the experts over expert-TP x EP x
 * expert-DP x PP on the same ranks ({@link ProcessGroups#ep()}, {@link ProcessGroups#expertTp()},
 * {@link ProcessGroups#expertDp()}). Each rank routes its own tokens: with sequence parallelism the
 * input is already the rank's sequence chunk; without it and with TP above 1, the replicated input is
 * split along the sequence on entry and the output all-gathered on exit (so every token is routed
 * once per TP group and the router's gradient is partial per TP rank). Tokens reach their experts by
 * all-gather or all-to-all ({@link MoeConfig.Dispatcher}); both give the same results.
 *
 * <p><b>Losses.</b> The load-balancing and z-losses are attached to the router's probabilities and
 * logits through {@link AuxLossAutoScaler}: they reach the gradients with the upstream gradient of
 * the {@link AuxLossScale} given at build time, and never appear in the forward output.
 *
 * <p><b>Parameters and checkpoints.</b> The router weight is dense (kind
 * {@link Parameter.Kind#SEQUENCE_PARALLEL} when TP is above 1, since each TP rank's gradient covers
 * its tokens only); expert weights are {@link Parameter.Kind#EXPERT}; the shared expert is an
 * ordinary tensor-parallel MLP. {@link #shardedState} keys experts by their global index, so a
 * checkpoint written under one expert layout loads under another.
 *
 * <p><b>Keys and replicas.</b> {@code router.weight} (and {@code router.expert_bias}): main replica
 * on the rank with TP, DP and CP rank 0; {@code experts.local_experts.<global index>.linear_fc1.weight},
 * {@code linear_fc2.weight} (and biases): at their expert-TP offsets, main replica on expert-DP
 * rank 0 (the fc2 bias, whole on every expert-TP rank, on expert-TP rank 0 too);
 * {@code shared_experts.linear_fc1.weight} etc. as the tensor-parallel linears describe them,
 * non-main on DP or CP ranks above 0. A caller must not mark these pieces again by dense
 * data-parallel rank: with EP above 1, different dense DP ranks hold different experts.
 *
 * <p>Not thread-safe; one instance per rank and layer. {@link #close()} releases every parameter
 * and state tensor.
 */
public final class MoeLayer extends AbstractModule implements UnaryModule {
    private static final Logger LOG = LoggerFactory.getLogger(MoeLayer.class);
    /** Whether the process has said once that the shared expert's overlap does not apply to its layout. */
    private static volatile boolean loggedNoOverlap;
    private final MoeConfig config;
    private final int hiddenSize;
    private final Communicator tp;
    private final TopKRouter router;
    private final TokenDispatcher dispatcher;
    private final LocalExperts experts;
    private final ParallelMlp sharedExpert;
    private final DeterministicRandom jitter;
    private final DeterministicRandom balanceOffsets;

    private MoeLayer(MoeConfig config, int hiddenSize, MoeGroups groups, TopKRouter router, TokenDispatcher dispatcher,
                     LocalExperts experts, ParallelMlp sharedExpert, DeterministicRandom jitter,
                     DeterministicRandom balanceOffsets) {
        this.config = config;
        this.hiddenSize = hiddenSize;
        this.tp = groups.tp();
        this.router = registerModule("router.", router);
        this.dispatcher = dispatcher;
        this.experts = registerModule("experts.", experts);
        this.sharedExpert = sharedExpert == null ? null
                : registerModule("shared_experts.", sharedExpert, groups.isDenseDataParallelReplica());
        this.jitter = jitter;
        this.balanceOffsets = balanceOffsets;
    }

    /**
     * Builds the layer and its parameters.
     *
     * @param config the MoE options
     * @param hiddenSize the model width h
     * @param groups this rank's process groups
     * @param parameters the manager that owns the parameters (and the router's state)
     * @param seeds the model's seed scheme: weights are initialised from {@code seeds.seed("init/" + key)}
     *              of their global key, input jitter from region {@code "moe-input-jitter/" + keyPrefix}
     *              at this rank's global rank
     * @param keyPrefix the layer's key, e.g. {@code "decoder.layers.3.mlp."}
     * @param auxLossScale the upstream gradient of the auxiliary losses (one holder per rank)
     * @return the layer
     * @throws IllegalArgumentException if the experts are not divisible by the expert-parallel size,
     *         or a width is not divisible by the tensor-parallel size that splits it
     */
    public static MoeLayer build(MoeConfig config, int hiddenSize, ProcessGroups groups, NDManager parameters,
                                 SeedScheme seeds, String keyPrefix, AuxLossScale auxLossScale) {
        Objects.requireNonNull(config, "config");
        Objects.requireNonNull(groups, "groups");
        Objects.requireNonNull(parameters, "parameters");
        Objects.requireNonNull(seeds, "seeds");
        Objects.requireNonNull(keyPrefix, "keyPrefix");
        Objects.requireNonNull(auxLossScale, "auxLossScale");
        MoeGroups g = MoeGroups.of(groups);
        if (hiddenSize < 1) {
            throw new IllegalArgumentException("hidden size must be at least 1, got " + hiddenSize);
        }
        if (config.numExperts() % g.ep().size() != 0) {
            throw new IllegalArgumentException(config.numExperts() + " experts are not divisible by expert parallel size "
                    + g.ep().size());
        }
        if (config.ffnHiddenSize() % g.expertTp().size() != 0) {
            throw new IllegalArgumentException("expert ffn hidden size " + config.ffnHiddenSize()
                    + " is not divisible by expert tensor parallel size " + g.expertTp().size());
        }
        if (config.sharedExpertFfnHiddenSize() % g.tp().size() != 0) {
            throw new IllegalArgumentException("shared expert ffn hidden size " + config.sharedExpertFfnHiddenSize()
                    + " is not divisible by tensor parallel size " + g.tp().size());
        }
        DeterministicRandom jitter = config.inputJitter() > 0
                ? seeds.generator("moe-input-jitter/" + keyPrefix, groups.worldRank()) : null;
        DeterministicRandom balanceOffsets = null;
        long balanceTableSeed = 0;
        if (config.forceLoadBalancing()) {
            balanceOffsets = seeds.generator("moe-force-balance/" + keyPrefix, groups.worldRank());
            balanceTableSeed = seeds.generator("moe-force-balance-table/" + keyPrefix, groups.worldRank()).nextLong();
        }
        TopKRouter router = new TopKRouter(config, hiddenSize, g, parameters,
                seeds.seed("init/" + keyPrefix + "router.weight"), jitter, balanceOffsets, balanceTableSeed,
                auxLossScale);
        LocalExperts experts = new LocalExperts(config, hiddenSize, g, parameters, seeds, keyPrefix);
        ParallelMlp shared = config.sharedExpertFfnHiddenSize() > 0
                ? sharedExpert(config, hiddenSize, g, parameters, seeds, keyPrefix + "shared_experts.") : null;
        TokenDispatcher dispatcher = config.dispatcher() == MoeConfig.Dispatcher.ALL_TO_ALL
                ? new AllToAllTokenDispatcher(g, config.numExperts(), config.topK(), config.permuteFusion(),
                        experts.readsGroupEnds())
                : new AllGatherTokenDispatcher(g, config.numExperts(), config.topK(), config.permuteFusion());
        if (shared != null && config.sharedExpertOverlap() && g.ep().size() > 1
                && (!config.permuteFusion() || g.expertTp().size() > 1) && !loggedNoOverlap) {
            loggedNoOverlap = true;
            LOG.info("the shared expert's overlap with the dispatch needs the fused permutation and expert tensor parallel"
                    + " size 1 (here {}, {}): the shared expert runs after the dispatch", config.permuteFusion()
                    ? "fused" : "not fused", g.expertTp().size());
        }
        return new MoeLayer(config, hiddenSize, g, router, dispatcher, experts, shared, jitter, balanceOffsets);
    }

    /**
     * The shared expert (Megatron-Core's {@code SharedExpertMLP}): the dense MLP every token passes
     * through, added to the routed experts' output, over the dense TP group with sequence
     * parallelism as configured; its parameters are dense (averaged over data parallelism).
     */
    private static ParallelMlp sharedExpert(MoeConfig config, int hiddenSize, MoeGroups groups, NDManager parameters,
                                            SeedScheme seeds, String key) {
        int width = config.sharedExpertFfnHiddenSize();
        int factor = config.activation().fc1Factor();
        ColumnParallelLinear fc1 = ColumnParallelLinear.builder(hiddenSize, factor * width, groups.tp())
                .bias(config.addBias()).sequenceParallel(config.sequenceParallel()).stride(factor)
                .initializer(Initializers.normal(config.initStd(), seeds.seed("init/" + key + "linear_fc1.weight")))
                .dtype(config.dtype()).manager(parameters).name(key + "linear_fc1").build();
        RowParallelLinear fc2 = RowParallelLinear.builder(width, hiddenSize, groups.tp()).bias(config.addBias())
                .inputIsParallel(true).sequenceParallel(config.sequenceParallel())
                .initializer(Initializers.normal(config.outputInitStd(), seeds.seed("init/" + key + "linear_fc2.weight")))
                .dtype(config.dtype()).manager(parameters).name(key + "linear_fc2").build();
        return new ParallelMlp(fc1, fc2, config.activation(), true);
    }

    /**
     * Applies the layer.
     *
     * @param scope the pass's scope; owns the output. With grad recorded the auxiliary losses are
     *              attached and routing statistics accumulate
     * @param hidden {@code [s, b, h]}, or {@code [s/TP, b, h]} with sequence parallelism
     * @return the output, same shape and dtype
     * @throws IllegalArgumentException if the input is not {@code [s, b, h]}, or without sequence
     *         parallelism {@code s} is not divisible by the TP size
     */
    @Override
    public NDArray forward(AutogradScope scope, NDArray hidden) {
        Shape shape = hidden.getShape();
        if (shape.dimension() != 3 || shape.get(2) != hiddenSize) {
            throw new IllegalArgumentException("MoE layer input of shape " + shape + " must be [s, b, " + hiddenSize + "]");
        }
        NDManager m = scope.manager();
        boolean splitHere = tp.size() > 1 && !config.sequenceParallel();
        NDArray local = splitHere ? Mappings.scatterToSequenceParallelRegion(scope, tp, hidden) : hidden;
        long seq = local.getShape().get(0);
        long batch = local.getShape().get(1);
        // both made before the dispatch's Functions: their gradients' backward through the router and the layer norm
        // waits for one traversal before the Functions recorded earlier
        NDArray tokens = scope.markMade(Tensors.own(local.reshape(seq * batch, hiddenSize), m));
        Routing routing = router.route(scope, tokens, seq, batch);
        scope.markMade(routing.probs());
        // the shared expert's forward beside the dispatch: while the tokens travel with the overlap, else while the
        // host waits for the counts (the device runs it instead of idling)
        NDArray[] shared = new NDArray[1];
        TokenDispatcher.Dispatched dispatched = sharedExpert == null ? dispatcher.dispatch(scope, tokens, routing)
                : dispatcher.dispatch(scope, tokens, routing, () -> shared[0] = sharedExpert.forward(scope, hidden),
                        config.sharedExpertOverlap() ? TokenDispatcher.Beside.TRAVEL : TokenDispatcher.Beside.COUNTS);
        NDArray expertOutput = experts.forward(scope, dispatched.expertInput(), dispatched.tokensPerExpert(),
                dispatched.expertEnds());
        NDArray combined = dispatched.combine(scope, expertOutput);
        NDArray out = Tensors.own(Cast.apply(scope, combined, DataTypes.of(hidden)).reshape(seq, batch, hiddenSize), m);
        if (splitHere) {
            out = Mappings.gatherFromSequenceParallelRegion(scope, tp, out, false);
        }
        if (sharedExpert != null) {
            out = Tensors.own(out.add(shared[0]), m);
        }
        return out;
    }

    /**
     * Aux-loss-free balancing: updates the router's expert bias from the token counts of the step's
     * micro-batches (see {@link TopKRouter#updateExpertBias()}). Call once per step, after the last
     * backward and before the optimizer, on every rank of the stage. A no-op when disabled.
     */
    public void updateExpertBias() {
        router.updateExpertBias();
    }

    /** Clears the token counts of the global aux loss; call once per step after the last micro-batch. */
    public void resetGlobalAuxLossTracker() {
        router.resetGlobalAuxLossTracker();
    }

    /**
     * The random state the layer consumes (input jitter, the windows of forced load balancing's random logits), for
     * {@link Recompute}: restoring it before a rerun reproduces the first run's noise and routing.
     *
     * @return a replay; {@link Recompute.Replay#NONE} with neither
     */
    public Recompute.Replay randomState() {
        if (jitter == null && balanceOffsets == null) {
            return Recompute.Replay.NONE;
        }
        return new Recompute.Replay() {
            @Override
            public Object capture() {
                return new long[] {jitter == null ? 0 : jitter.state(), balanceOffsets == null ? 0 : balanceOffsets.state()};
            }

            @Override
            public void restore(Object token) {
                long[] states = (long[]) token;
                if (jitter != null) {
                    jitter.restore(states[0]);
                }
                if (balanceOffsets != null) {
                    balanceOffsets.restore(states[1]);
                }
            }
        };
    }

    /** @return the router */
    public TopKRouter router() {
        return router;
    }

    /** @return the options */
    public MoeConfig config() {
        return config;
    }

    /** @return global index of this rank's first expert */
    public int firstLocalExpert() {
        return experts.firstLocalExpert();
    }

    /** @return number of experts on this rank, {@code E / EP} */
    public int numLocalExperts() {
        return experts.size();
    }

    /**
     * The parameters of one local expert.
     *
     * @param local index among this rank's experts, in {@code [0, E / EP)}
     * @return fc1 weight, fc2 weight, then fc1 and fc2 biases when configured
     */
    public List<Parameter> expertParameters(int local) {
        return experts.expertParameters(local);
    }

    @Override
    public String toString() {
        return "MoeLayer{" + config.numExperts() + " experts (" + experts.firstLocalExpert() + ".."
                + (experts.firstLocalExpert() + experts.size() - 1) + " here), top-" + config.topK() + ", "
                + config.dispatcher() + ", hidden " + hiddenSize + ", ffn " + config.ffnHiddenSize()
                + (sharedExpert != null ? ", shared expert " + config.sharedExpertFfnHiddenSize() : "") + "}";
    }
}
