package io.mcore4j.moe;

import static io.mcore4j.moe.Fixtures.assertClose;
import static io.mcore4j.moe.Fixtures.grad;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.index.NDIndex;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.random.DeterministicRandom;
import io.mcore4j.core.random.SeedScheme;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * Forced load balancing ({@code --moe-router-force-load-balancing}, Megatron's benchmark-only routing on random
 * logits): experts the weights would starve receive about equal loads, the gradient reaches the gating linear as if
 * the random logits were its output, and a layer rerun from its captured random state routes as its first run.
 */
class ForceLoadBalancingTest {
    private static final int SEQ = 128;
    private static final int BATCH = 4;
    private static final int HIDDEN = 8;
    private static final int EXPERTS = 8;
    private static final int TOP_K = 2;

    private static MoeConfig config(boolean force) {
        return config(force, DataType.FLOAT32);
    }

    private static MoeConfig config(boolean force, DataType dtype) {
        return MoeConfig.builder(EXPERTS, TOP_K, 8).initStd(0.3).outputInitStd(0.2).auxLossCoeff(1e-2)
                .forceLoadBalancing(force).dtype(dtype).build();
    }

    /** Tokens whose feature 0 is 5, read by experts 0 and 1 only (weight 10): every token prefers them. */
    private static NDArray starvingTokens(NDManager m, MoeLayer... layers) {
        for (MoeLayer l : layers) {
            NDArray w = l.router().weight().data().duplicate();
            w.set(new NDIndex(":, 0"), 0f);
            w.set(new NDIndex("0:2, 0"), 10f);
            Tensors.copyInto(l.router().weight().data(), w);
            w.close();
        }
        NDArray x = Fixtures.normal(m, 31, 1.0, SEQ * BATCH, HIDDEN);
        x.set(new NDIndex(":, 0"), 5f);
        return x;
    }

    private static long[] counts(Routing r) {
        return r.routingMap().sum(new int[] {0}).toType(DataType.INT64, false).toLongArray();
    }

    @ParameterizedTest
    @EnumSource(value = DataType.class, names = {"FLOAT32", "BFLOAT16"})
    void expertsTheWeightsWouldStarveReceiveAboutEqualLoads(DataType dtype) {
        try (NDManager m = NDManager.newBaseManager();
             MoeLayer forced = MoeLayer.build(config(true, dtype), HIDDEN, Fixtures.soloGroups(), m, new SeedScheme(8), "mlp.",
                     new AuxLossScale());
             MoeLayer natural = MoeLayer.build(config(false, dtype), HIDDEN, Fixtures.soloGroups(), m, new SeedScheme(8), "mlp.",
                     new AuxLossScale());
             AutogradScope scope = AutogradScope.open(m)) {
            NDArray x = DataTypes.toType(starvingTokens(scope.manager(), forced, natural), dtype, false);
            long tokens = (long) SEQ * BATCH;
            assertArrayEquals(new long[] {tokens, tokens, 0, 0, 0, 0, 0, 0},
                    counts(natural.router().route(scope, x, SEQ, BATCH)), "the weights alone pick experts 0 and 1");
            long mean = tokens * TOP_K / EXPERTS;
            for (int call = 0; call < 3; call++) {
                long[] c = counts(forced.router().route(scope, x, SEQ, BATCH));
                for (int e = 0; e < EXPERTS; e++) {
                    assertTrue(c[e] > 0.7 * mean && c[e] < 1.3 * mean,
                            "call " + call + ": expert " + e + " received " + c[e] + " tokens, expected about " + mean);
                }
            }
        }
    }

    @Test
    void theGradientReachesTheGatingLinearAsIfTheRandomLogitsWereItsOutput() {
        DeterministicRandom offsets = new DeterministicRandom(5);
        try (NDManager m = NDManager.newBaseManager();
             TopKRouter router = new TopKRouter(config(true), HIDDEN, MoeGroups.of(Fixtures.soloGroups()), m, 1, null,
                     offsets, 9, new AuxLossScale());
             AutogradScope scope = AutogradScope.open(m)) {
            NDManager s = scope.manager();
            NDArray x = Fixtures.normal(s, 41, 1.0, SEQ * BATCH, HIDDEN);
            NDArray upstream = Fixtures.normal(s, 42, 1.0, SEQ * BATCH, EXPERTS);
            long before = offsets.state();
            Routing forced = router.route(scope, x, SEQ, BATCH);
            scope.backward(new NDArray[] {forced.probs()}, new NDArray[] {upstream});
            NDArray weightGrad = grad(router.weight().data(), s);

            offsets.restore(before);
            NDArray random = Fixtures.leaf(router.randomLogits(s.zeros(forced.probs().getShape()), s), s);
            Routing reference = router.routeLogits(scope, random, SEQ, BATCH);
            scope.backward(new NDArray[] {reference.probs()}, new NDArray[] {upstream});
            assertEquals(Fixtures.maxAbs(reference.routingMap().sub(forced.routingMap())), 0.0, "routing map");
            assertClose("probabilities", forced.probs(), reference.probs(), 1e-6);
            // the gating linear is x W^T: its weight's gradient is dlogits^T x
            NDArray expected = grad(random, s).transpose().matMul(x);
            assertClose("router weight gradient", weightGrad, expected, 1e-5);
            assertTrue(Fixtures.maxAbs(expected) > 0, "the reference gradient must not vanish");
        }
    }

    @Test
    void aLayerRerunFromItsCapturedRandomStateRoutesAsItsFirstRun() {
        try (NDManager m = NDManager.newBaseManager();
             MoeLayer layer = MoeLayer.build(config(true), HIDDEN, Fixtures.soloGroups(), m, new SeedScheme(8), "mlp.",
                     new AuxLossScale());
             AutogradScope scope = AutogradScope.open(m)) {
            NDArray x = Fixtures.normal(scope.manager(), 51, 1.0, SEQ, BATCH, HIDDEN);
            Object state = layer.randomState().capture();
            NDArray first = layer.forward(scope, x);
            NDArray next = layer.forward(scope, x);
            layer.randomState().restore(state);
            NDArray rerun = layer.forward(scope, x);
            assertClose("rerun", rerun, first, 0);
            assertFalse(Fixtures.maxAbs(next.sub(first)) == 0, "the next routing draws new random logits");
        }
    }
}
