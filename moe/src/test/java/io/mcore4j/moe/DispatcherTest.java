package io.mcore4j.moe;

import static io.mcore4j.moe.Fixtures.assertClose;
import static io.mcore4j.moe.Fixtures.grad;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.ReduceOp;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.List;

import io.mcore4j.tensorparallel.MlpActivation;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * Acceptance 2 (dispatch then combine with weights 1/k is the identity) and acceptance 3 (the
 * all-gather and all-to-all dispatchers give the same layer outputs and gradients).
 */
class DispatcherTest {
    static final int TOKENS = 12;
    static final int HIDDEN = 4;

    /**
     * Token {@code t} of rank {@code r} goes to experts {@code (t + r) mod E, (t + r + 1) mod E, ...}
     * (k consecutive experts) with weight 1/k each, so every expert receives tokens from every rank
     * in uneven numbers.
     */
    static Routing fixedRouting(NDManager m, int rank, int experts, int k) {
        float[] map = new float[TOKENS * experts];
        for (int t = 0; t < TOKENS; t++) {
            int first = (t * t + rank) % experts; // uneven loads
            for (int j = 0; j < k; j++) {
                map[t * experts + (first + j) % experts] = 1;
            }
        }
        NDArray routingMap = m.create(map, new Shape(TOKENS, experts));
        NDArray probs = routingMap.div(k);
        probs.attach(m);
        return new Routing(probs, routingMap, routingMap, k, -1);
    }

    @ParameterizedTest(name = "world {0}: EP{1} expert-TP{2}, {3} experts, top-{4}, {5}, fused={6}")
    @CsvSource({
        "2, 2, 1, 4, 2, ALL_GATHER, false", "2, 2, 1, 4, 2, ALL_TO_ALL, false",
        "4, 4, 1, 8, 4, ALL_GATHER, false", "4, 4, 1, 8, 4, ALL_TO_ALL, false",
        "4, 2, 2, 4, 2, ALL_GATHER, false", "4, 2, 2, 4, 2, ALL_TO_ALL, false",
        "4, 4, 1, 8, 4, ALL_GATHER, true", "4, 2, 2, 4, 2, ALL_TO_ALL, true"})
    void dispatchThenCombineWithWeightsOneOverKRestoresTheInput(int world, int ep, int etp, int experts, int k,
                                                                MoeConfig.Dispatcher kind, boolean fused) {
        InJvmWorld.run(world, ctx -> {
            ProcessGroups groups = ctx.groups(ParallelDims.builder(world).expertParallel(ep).expertTensorParallel(etp).build());
            TokenDispatcher dispatcher = dispatcher(kind, groups, experts, k, fused);
            try (NDManager m = ctx.manager().newSubManager(); AutogradScope scope = AutogradScope.open(m)) {
                NDManager s = scope.manager();
                NDArray x = Fixtures.leaf(Fixtures.normal(s, 30 + ctx.rank(), 1.0, TOKENS, HIDDEN), s);
                Routing routing = fixedRouting(s, ctx.rank(), experts, k);
                TokenDispatcher.Dispatched d = dispatcher.dispatch(scope, x, routing);
                // every rank of the expert-TP x EP box sends its routed rows to this rank's experts
                long[] expected = expectedRowsPerLocalExpert(groups, experts, k);
                assertArrayEquals(expected, d.tokensPerExpert(), "rows per local expert on rank " + ctx.rank());
                if (kind == MoeConfig.Dispatcher.ALL_TO_ALL && etp == 1) {
                    // the grouped GEMM's group ends, made on the device from the gathered counts
                    long[] ends = new long[expected.length];
                    for (int e = 0; e < ends.length; e++) {
                        ends[e] = (e == 0 ? 0 : ends[e - 1]) + expected[e];
                    }
                    assertArrayEquals(ends, d.expertEnds().toType(ai.djl.ndarray.types.DataType.INT64, false)
                            .toLongArray(), "group ends on rank " + ctx.rank());
                }
                // identity experts, split into equal partial sums over expert-TP
                NDArray partial = SerialMoe.scaled(d.expertInput(), 1.0 / etp, s);
                NDArray y = d.combine(scope, partial);
                assertEquals(0.0, io.mcore4j.core.testing.NativeArrays.maxAbsDiff(y, x), "combine(dispatch(x)) == x");
                NDArray upstream = Fixtures.normal(s, 50 + ctx.rank(), 1.0, TOKENS, HIDDEN);
                scope.backward(new NDArray[] {y}, new NDArray[] {upstream});
                assertClose("the identity's input gradient", grad(x, s), upstream, 1e-6);
            }
            return null;
        });
    }

    @ParameterizedTest(name = "EP2, {0}, fused={1}, beside {2}")
    @CsvSource({"ALL_TO_ALL, true, COUNTS", "ALL_TO_ALL, true, TRAVEL", "ALL_TO_ALL, false, COUNTS",
        "ALL_TO_ALL, false, TRAVEL", "ALL_GATHER, false, COUNTS", "ALL_GATHER, false, TRAVEL"})
    void workBesideTheDispatchRunsOnceAndLeavesTheRowsAsTheyWere(MoeConfig.Dispatcher kind, boolean fused,
                                                                 TokenDispatcher.Beside where) {
        int experts = 4;
        int k = 2;
        InJvmWorld.run(2, ctx -> {
            ProcessGroups groups = ctx.groups(ParallelDims.builder(2).expertParallel(2).build());
            TokenDispatcher dispatcher = dispatcher(kind, groups, experts, k, fused);
            try (NDManager m = ctx.manager().newSubManager(); AutogradScope scope = AutogradScope.open(m)) {
                NDManager s = scope.manager();
                NDArray x = Fixtures.normal(s, 30 + ctx.rank(), 1.0, TOKENS, HIDDEN);
                Routing routing = fixedRouting(s, ctx.rank(), experts, k);
                TokenDispatcher.Dispatched plain = dispatcher.dispatch(scope, x, routing);
                int[] runs = new int[1];
                TokenDispatcher.Dispatched withWork = dispatcher.dispatch(scope, x, routing, () -> runs[0]++, where);
                assertEquals(1, runs[0], "runs of the work beside the dispatch on rank " + ctx.rank());
                assertArrayEquals(plain.tokensPerExpert(), withWork.tokensPerExpert(), "rows per local expert");
                assertEquals(0.0, io.mcore4j.core.testing.NativeArrays.maxAbsDiff(plain.expertInput(),
                        withWork.expertInput()), "the experts' rows on rank " + ctx.rank());
            }
            return null;
        });
    }

    /**
     * A routing padded to capacity tells the dispatchers its rows per expert ({@link Routing#rowsPerExpert()}), so they
     * read no counts on the host: the same rows, group ends, combined outputs and gradients as the dispatch that
     * reads the counts of the same maps.
     */
    @ParameterizedTest(name = "world {0}: EP{1} expert-TP{2}, {3}, fused={4}")
    @CsvSource({
        "2, 2, 1, ALL_TO_ALL, true", "2, 2, 1, ALL_TO_ALL, false", "4, 4, 1, ALL_TO_ALL, true",
        "4, 2, 2, ALL_TO_ALL, true", "2, 2, 1, ALL_GATHER, true", "4, 2, 2, ALL_GATHER, false"})
    void aRoutingPaddedToCapacityDispatchesAsItsReadCountsDo(int world, int ep, int etp, MoeConfig.Dispatcher kind,
                                                            boolean fused) {
        int experts = 4;
        int k = 2;
        InJvmWorld.run(world, ctx -> {
            ProcessGroups groups = ctx.groups(ParallelDims.builder(world).expertParallel(ep).expertTensorParallel(etp).build());
            TokenDispatcher dispatcher = dispatcher(kind, groups, experts, k, fused);
            try (NDManager m = ctx.manager().newSubManager(); AutogradScope scope = AutogradScope.open(m)) {
                NDManager s = scope.manager();
                Routing fixed = fixedRouting(s, ctx.rank(), experts, k);
                long capacity = TokenDropping.capacity(TOKENS, k, experts, 0.75);
                NDArray padded = TokenDropping.capacityMask(fixed.probs(), fixed.routingMap(), capacity,
                        MoeConfig.DropPolicy.PROBS, s);
                NDArray kept = fixed.routingMap().mul(padded);
                kept.attach(s);
                NDArray probs = fixed.probs().mul(kept);
                probs.attach(s);
                String at = "rank " + ctx.rank() + ": ";
                NDArray[] outputs = new NDArray[2];
                NDArray[] inputs = new NDArray[2];
                TokenDispatcher.Dispatched[] dispatched = new TokenDispatcher.Dispatched[2];
                for (int i = 0; i < 2; i++) {
                    Routing routing = new Routing(probs, padded, kept, k, capacity, null, i == 0);
                    assertEquals(i == 0 ? capacity : -1, routing.rowsPerExpert(), at + "rows per expert of the routing");
                    inputs[i] = Fixtures.leaf(Fixtures.normal(s, 30 + ctx.rank(), 1.0, TOKENS, HIDDEN), s);
                    dispatched[i] = dispatcher.dispatch(scope, inputs[i], routing);
                    outputs[i] = dispatched[i].combine(scope, SerialMoe.scaled(dispatched[i].expertInput(), 1.0 / etp, s));
                }
                long[] rows = dispatched[1].tokensPerExpert();
                assertArrayEquals(rows, dispatched[0].tokensPerExpert(), at + "rows per local expert");
                long[] ends = new long[rows.length];
                for (int e = 0; e < ends.length; e++) {
                    assertEquals(capacity * ep * etp, rows[e], at + "every expert padded to its capacity from every rank");
                    ends[e] = (e == 0 ? 0 : ends[e - 1]) + rows[e];
                }
                assertArrayEquals(ends, dispatched[0].expertEnds().toType(ai.djl.ndarray.types.DataType.INT64, false)
                        .toLongArray(), at + "group ends made on the device");
                assertEquals(0.0, io.mcore4j.core.testing.NativeArrays.maxAbsDiff(dispatched[0].expertInput(),
                        dispatched[1].expertInput()), at + "the experts' rows");
                assertEquals(0.0, io.mcore4j.core.testing.NativeArrays.maxAbsDiff(outputs[0], outputs[1]), at + "combined");
                NDArray upstream = Fixtures.normal(s, 50 + ctx.rank(), 1.0, TOKENS, HIDDEN);
                scope.backward(outputs, new NDArray[] {upstream, upstream});
                assertClose(at + "input gradient", grad(inputs[0], s), grad(inputs[1], s), 0);
                org.junit.jupiter.api.Assertions.assertTrue(grad(inputs[0], s).abs().sum().getFloat() > 0,
                        at + "kept pairs carry gradient");
            }
            return null;
        });
    }

    private static TokenDispatcher dispatcher(MoeConfig.Dispatcher kind, ProcessGroups groups, int experts, int k,
                                              boolean fused) {
        MoeGroups g = MoeGroups.of(groups);
        return kind == MoeConfig.Dispatcher.ALL_TO_ALL
                ? new AllToAllTokenDispatcher(g, experts, k, fused) : new AllGatherTokenDispatcher(g, experts, k, fused);
    }

    /** Rows each local expert receives under {@link #fixedRouting}, from every rank of this rank's box. */
    private static long[] expectedRowsPerLocalExpert(ProcessGroups groups, int experts, int k) {
        int local = experts / groups.ep().size();
        int first = groups.ep().rank() * local;
        long[] out = new long[local];
        int[] boxRanks = groups.expertGrid().groupOf("tp-ep", groups.worldRank());
        for (int rank : boxRanks) {
            for (int t = 0; t < TOKENS; t++) {
                int start = (t * t + rank) % experts;
                for (int j = 0; j < k; j++) {
                    int e = (start + j) % experts;
                    if (e >= first && e < first + local) {
                        out[e - first]++;
                    }
                }
            }
        }
        return out;
    }

    static MoeConfig.Builder base() {
        return MoeConfig.builder(4, 2, 8).initStd(0.3).outputInitStd(0.2);
    }

    @ParameterizedTest(name = "world {0}: TP{1} EP{2} expert-TP{3} SP={4} {5}")
    @CsvSource({
        "2, 1, 2, 1, false, dropless",
        "4, 2, 2, 1, true, swiglu-aux",
        "4, 1, 2, 2, false, padded-bias",
        "4, 2, 4, 1, false, dropping"})
    void allGatherAndAllToAllGiveTheSameOutputsAndGradients(int world, int tp, int ep, int etp, boolean sp, String variant) {
        MoeConfig.Builder b = base().sequenceParallel(sp);
        switch (variant) {
            case "swiglu-aux" -> b.activation(MlpActivation.SWIGLU).auxLossCoeff(0.1).zLossCoeff(0.01);
            case "padded-bias" -> b.capacityFactor(0.75).padToCapacity(true).addBias(true);
            case "dropping" -> b.capacityFactor(1.0).auxLossCoeff(0.1);
            default -> { }
        }
        MoeConfig allGather = b.dispatcher(MoeConfig.Dispatcher.ALL_GATHER).build();
        MoeConfig allToAll = b.dispatcher(MoeConfig.Dispatcher.ALL_TO_ALL).build();
        InJvmWorld.run(world, ctx -> {
            ProcessGroups groups = ctx.groups(ParallelDims.builder(world).tensorParallel(tp).expertParallel(ep)
                    .expertTensorParallel(etp).build());
            try (NDManager m = ctx.manager().newSubManager()) {
                MoeLayer a = MoeLayer.build(allGather, 8, groups, m, new SeedScheme(5), "mlp.", new AuxLossScale(0.5));
                MoeLayer c = MoeLayer.build(allToAll, 8, groups, m, new SeedScheme(5), "mlp.", new AuxLossScale(0.5));
                try (AutogradScope scope = AutogradScope.open(m)) {
                    NDManager s = scope.manager();
                    int dp = groups.dataParallelRank();
                    NDArray full = Fixtures.normal(s, 70 + dp, 1.0, 8, 2, 8);
                    NDArray upFull = Fixtures.normal(s, 80 + dp, 1.0, 8, 2, 8);
                    int tpRank = groups.tensorParallelRank();
                    NDArray input = sp ? Fixtures.chunk(full, tp, tpRank, s) : full;
                    NDArray upstream = sp ? Fixtures.chunk(upFull, tp, tpRank, s) : upFull;
                    NDArray xa = Fixtures.leaf(input, s);
                    NDArray xc = Fixtures.leaf(input, s);
                    NDArray ya = a.forward(scope, xa);
                    NDArray yc = c.forward(scope, xc);
                    scope.backward(new NDArray[] {ya, yc}, new NDArray[] {upstream, upstream});
                    String at = "rank " + ctx.rank() + " " + variant + ": ";
                    assertClose(at + "output", yc, ya, 1e-6);
                    assertClose(at + "input gradient", grad(xc, s), grad(xa, s), 1e-6);
                    List<io.mcore4j.core.nn.Parameter> pa = a.parameters();
                    List<io.mcore4j.core.nn.Parameter> pc = c.parameters();
                    for (int i = 0; i < pa.size(); i++) {
                        assertClose(at + pa.get(i).name() + " gradient", Fixtures.gradOrZeros(pc.get(i).data(), s),
                                Fixtures.gradOrZeros(pa.get(i).data(), s), 1e-6);
                    }
                    // the comparison must not be vacuous
                    NDArray norm = groups.world().allReduce(grad(xa, s).abs().sum(), ReduceOp.SUM, s);
                    org.junit.jupiter.api.Assertions.assertTrue(norm.getFloat() > 0, "gradients reached the input");
                }
                a.close();
                c.close();
            }
            return null;
        });
    }

    /**
     * Evaluation: a scope without grad records nothing (no auxiliary losses, no collectives in
     * backward) and gives the same output as a training pass, with either dispatcher.
     */
    @ParameterizedTest(name = "{0}")
    @CsvSource({"ALL_GATHER", "ALL_TO_ALL"})
    void aPassWithoutGradGivesTheTrainingOutput(MoeConfig.Dispatcher kind) {
        MoeConfig config = base().dispatcher(kind).auxLossCoeff(0.1).zLossCoeff(0.01).capacityFactor(1.0).build();
        InJvmWorld.run(2, ctx -> {
            ProcessGroups groups = ctx.groups(ParallelDims.builder(2).expertParallel(2).build());
            try (NDManager m = ctx.manager().newSubManager();
                 MoeLayer layer = MoeLayer.build(config, 8, groups, m, new SeedScheme(5), "mlp.", new AuxLossScale())) {
                NDArray input = Fixtures.normal(m, 90 + ctx.rank(), 1.0, 8, 2, 8);
                float[] training;
                try (AutogradScope scope = AutogradScope.open(m)) {
                    training = layer.forward(scope, Fixtures.leaf(input, scope.manager())).toFloatArray();
                }
                try (AutogradScope scope = AutogradScope.openNoGrad(m)) {
                    NDArray y = layer.forward(scope, input);
                    assertEquals(0, scope.recordedFunctions(), "nothing is recorded without grad");
                    assertArrayEquals(training, y.toFloatArray(), 0f, "evaluation output");
                }
            }
            return null;
        });
    }
}
