package io.mcore4j.moe;

import static io.mcore4j.moe.Fixtures.assertClose;
import static io.mcore4j.moe.Fixtures.grad;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.ArrayList;
import java.util.List;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * Acceptance 5: the gradient the auxiliary losses alone send to the layer's input does not depend
 * on how four ranks split tensor and expert parallelism, (TP, EP) = (4, 1), (2, 2), (1, 4).
 *
 * <p>The main output receives a zero upstream gradient, so the input gradient is exactly that of
 * the load-balancing losses (per micro-batch and per sequence) and the z-loss. For the losses to
 * describe the same micro-batch in every layout, every data-parallel rank gets the same batch: with
 * TP the ranks split its sequence and sum the expert counts over TP, without TP each rank holds all
 * of it. Each rank's gradient (its sequence chunk under TP) is compared with the single-rank
 * layer's on the whole batch, hence all layouts with each other.
 */
class AuxLossLayoutTest {
    static final int SEQ = 8;
    static final int BATCH = 2;
    static final int HIDDEN = 8;

    @ParameterizedTest(name = "TP{0} EP{1} SP={2}")
    @CsvSource({"4, 1, true", "2, 2, true", "1, 4, false", "4, 1, false", "2, 2, false"})
    void auxLossInputGradientIsTheSameForEveryLayout(int tp, int ep, boolean sp) {
        MoeConfig config = MoeConfig.builder(4, 2, 8).initStd(0.3).auxLossCoeff(0.3).seqAuxLossCoeff(0.2)
                .zLossCoeff(0.05).sequenceParallel(sp).dispatcher(MoeConfig.Dispatcher.ALL_TO_ALL).build();
        List<float[]> grads = InJvmWorld.run(4, ctx -> {
            ProcessGroups groups = ctx.groups(ParallelDims.builder(4).tensorParallel(tp).expertParallel(ep).expertTensorParallel(1).build());
            try (NDManager m = ctx.manager().newSubManager()) {
                MoeLayer layer = MoeLayer.build(config, HIDDEN, groups, m, new SeedScheme(4), "mlp.", new AuxLossScale());
                MoeLayer reference = MoeLayer.build(config, HIDDEN, Fixtures.soloGroups(), m, new SeedScheme(4), "mlp.",
                        new AuxLossScale());
                try (AutogradScope scope = AutogradScope.open(m)) {
                    NDManager s = scope.manager();
                    int tpRank = groups.tensorParallelRank();
                    NDArray batch = Fixtures.normal(s, 300, 1.0, SEQ, BATCH, HIDDEN); // the same on every DP rank
                    NDArray x = Fixtures.leaf(sp ? Fixtures.chunk(batch, tp, tpRank, s) : batch, s);
                    NDArray xr = Fixtures.leaf(batch, s);
                    NDArray y = layer.forward(scope, x);
                    NDArray yr = reference.forward(scope, xr);
                    NDArray zero = s.zeros(y.getShape());
                    scope.backward(new NDArray[] {y, yr}, new NDArray[] {zero, s.zeros(yr.getShape())});
                    NDArray dx = grad(x, s);
                    NDArray dxr = grad(xr, s);
                    assertTrue(Fixtures.maxAbs(dxr) > 1e-4, "the auxiliary losses must reach the input");
                    assertClose("rank " + ctx.rank() + " auxiliary-loss input gradient", dx,
                            sp ? Fixtures.chunk(dxr, tp, tpRank, s) : dxr, 1e-6);
                    NDArray routerSum = ExpertParallelTest.sum(groups.tp(), grad(layer.router().weight().data(), s), s);
                    assertClose("rank " + ctx.rank() + " router gradient summed over TP", routerSum,
                            grad(reference.router().weight().data(), s), 1e-6);
                    // the whole batch's gradient as this layout sees it, for the cross-layout comparison
                    NDArray whole = sp ? groups.tp().allGather(dx, 0, s) : dx;
                    return whole.toFloatArray();
                } finally {
                    layer.close();
                    reference.close();
                }
            }
        });
        for (int r = 1; r < grads.size(); r++) {
            org.junit.jupiter.api.Assertions.assertArrayEquals(grads.get(0), grads.get(r), 1e-6f,
                    "rank " + r + " against rank 0");
        }
    }

    /**
     * Context parallelism splits the sequence like sequence parallelism does: with CP2 x EP2 each
     * rank holds half of the sequence, the expert counts are summed over TP x CP, and output and
     * input gradient (main and auxiliary losses) equal the single-rank layer's on the whole sequence.
     */
    @Test
    void contextParallelRanksShareTheLoadBalancingCounts() {
        MoeConfig config = MoeConfig.builder(4, 2, 8).initStd(0.3).auxLossCoeff(0.3).seqAuxLossCoeff(0.2)
                .zLossCoeff(0.05).dispatcher(MoeConfig.Dispatcher.ALL_TO_ALL).build();
        InJvmWorld.run(2, ctx -> {
            ProcessGroups groups = ctx.groups(ParallelDims.builder(2).contextParallel(2).expertParallel(2).build());
            try (NDManager m = ctx.manager().newSubManager()) {
                MoeLayer layer = MoeLayer.build(config, HIDDEN, groups, m, new SeedScheme(4), "mlp.", new AuxLossScale());
                MoeLayer reference = MoeLayer.build(config, HIDDEN, Fixtures.soloGroups(), m, new SeedScheme(4), "mlp.",
                        new AuxLossScale());
                try (AutogradScope scope = AutogradScope.open(m)) {
                    NDManager s = scope.manager();
                    int cp = groups.cp().rank();
                    NDArray sequence = Fixtures.normal(s, 310, 1.0, SEQ, BATCH, HIDDEN);
                    NDArray upstream = Fixtures.normal(s, 311, 1.0, SEQ, BATCH, HIDDEN);
                    NDArray x = Fixtures.leaf(Fixtures.chunk(sequence, 2, cp, s), s);
                    NDArray xr = Fixtures.leaf(sequence, s);
                    NDArray y = layer.forward(scope, x);
                    NDArray yr = reference.forward(scope, xr);
                    scope.backward(new NDArray[] {y, yr}, new NDArray[] {Fixtures.chunk(upstream, 2, cp, s), upstream});
                    assertClose("rank " + ctx.rank() + " output", y, Fixtures.chunk(yr, 2, cp, s), 1e-5);
                    assertClose("rank " + ctx.rank() + " input gradient", grad(x, s), Fixtures.chunk(grad(xr, s), 2, cp, s),
                            1e-5);
                } finally {
                    layer.close();
                    reference.close();
                }
            }
            return null;
        });
    }

    /**
     * The global aux loss sums the counts over data parallelism: with distinct DP slices, each
     * rank's input gradient equals that of the single-rank layer on the concatenation of all slices
     * (batch-wise), where the counts cover every token.
     */
    @Test
    void globalAuxLossEqualsTheSerialLossOnTheWholeGlobalBatch() {
        int tp = 2;
        int dp = 2;
        MoeConfig config = MoeConfig.builder(4, 2, 8).initStd(0.3).globalAuxLossCoeff(0.4).sequenceParallel(true)
                .build();
        InJvmWorld.run(4, ctx -> {
            ProcessGroups groups = ctx.groups(ParallelDims.builder(4).tensorParallel(tp).expertParallel(2).expertTensorParallel(1).build());
            try (NDManager m = ctx.manager().newSubManager()) {
                MoeLayer layer = MoeLayer.build(config, HIDDEN, groups, m, new SeedScheme(4), "mlp.", new AuxLossScale());
                MoeLayer reference = MoeLayer.build(config, HIDDEN, Fixtures.soloGroups(), m, new SeedScheme(4), "mlp.",
                        new AuxLossScale());
                try (AutogradScope scope = AutogradScope.open(m)) {
                    NDManager s = scope.manager();
                    int d = groups.dataParallelRank();
                    int tpRank = groups.tensorParallelRank();
                    List<NDArray> slices = new ArrayList<>();
                    for (int i = 0; i < dp; i++) {
                        slices.add(Fixtures.normal(s, 400 + i, 1.0, SEQ, BATCH, HIDDEN));
                    }
                    NDArray global = ai.djl.ndarray.NDArrays.concat(new ai.djl.ndarray.NDList(slices), 1); // [s, dp*b, h]
                    global.attach(s);
                    NDArray x = Fixtures.leaf(Fixtures.chunk(slices.get(d), tp, tpRank, s), s);
                    NDArray xr = Fixtures.leaf(global, s);
                    NDArray y = layer.forward(scope, x);
                    NDArray yr = reference.forward(scope, xr);
                    scope.backward(new NDArray[] {y, yr}, new NDArray[] {s.zeros(y.getShape()), s.zeros(yr.getShape())});
                    NDArray mine = Fixtures.chunk(grad(xr, s).get(":, " + (d * BATCH) + ":" + ((d + 1) * BATCH)), tp,
                            tpRank, s);
                    assertTrue(Fixtures.maxAbs(mine) > 1e-4, "the global aux loss must reach the input");
                    assertClose("rank " + ctx.rank() + " global aux loss input gradient", grad(x, s), mine, 1e-6);
                    NDArray router = ExpertParallelTest.sum(groups.world(), grad(layer.router().weight().data(), s), s);
                    assertClose("router gradient summed over TP and DP", router,
                            grad(reference.router().weight().data(), s), 1e-6);
                } finally {
                    layer.close();
                    reference.close();
                }
            }
            return null;
        });
    }

    /**
     * The global aux loss averages the counts of every micro-batch since the last reset: without a
     * reset the second micro-batch's gradient differs from a fresh layer's, after it they agree.
     */
    @Test
    void globalAuxLossCountsAccumulateOverMicroBatchesUntilReset() {
        MoeConfig config = MoeConfig.builder(4, 2, 8).initStd(0.3).globalAuxLossCoeff(0.4).build();
        InJvmWorld.run(1, ctx -> {
            try (NDManager m = ctx.manager().newSubManager()) {
                MoeLayer layer = MoeLayer.build(config, HIDDEN, Fixtures.soloGroups(), m, new SeedScheme(4), "mlp.",
                        new AuxLossScale());
                NDArray a = Fixtures.normal(m, 500, 1.0, SEQ, BATCH, HIDDEN);
                NDArray b = Fixtures.normal(m, 501, 1.0, SEQ, BATCH, HIDDEN);
                float[] fresh = auxInputGradient(layer, b, m);
                layer.resetGlobalAuxLossTracker();
                auxInputGradient(layer, a, m);
                float[] accumulated = auxInputGradient(layer, b, m);
                layer.resetGlobalAuxLossTracker();
                float[] afterReset = auxInputGradient(layer, b, m);
                org.junit.jupiter.api.Assertions.assertArrayEquals(fresh, afterReset, 0f, "after a reset");
                assertTrue(!java.util.Arrays.equals(fresh, accumulated), "counts of the earlier micro-batch are averaged in");
                layer.close();
            }
            return null;
        });
    }

    private static float[] auxInputGradient(MoeLayer layer, NDArray input, NDManager m) {
        try (AutogradScope scope = AutogradScope.open(m)) {
            NDArray x = Fixtures.leaf(input, scope.manager());
            NDArray y = layer.forward(scope, x);
            scope.backward(new NDArray[] {y}, new NDArray[] {scope.manager().zeros(y.getShape())});
            return grad(x, scope.manager()).toFloatArray();
        }
    }
}
