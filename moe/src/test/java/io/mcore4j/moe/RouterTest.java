package io.mcore4j.moe;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.autograd.Recompute;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.List;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/** Acceptance 1 (routing-map sums under capacity), the drop policies, and the router's state. */
class RouterTest {
    static final int SEQ = 16;
    static final int BATCH = 2;
    static final int TOKENS = SEQ * BATCH;
    static final int HIDDEN = 8;
    static final int EXPERTS = 8;
    static final int TOP_K = 2;

    /** Routes {@link #TOKENS} fixed tokens with a layer built from {@code config}; returns [probs, routingMap, keptMap] as host arrays. */
    static float[][] route(MoeConfig config) {
        return InJvmWorld.run(1, ctx -> {
            try (NDManager m = ctx.manager().newSubManager();
                 MoeLayer layer = MoeLayer.build(config, HIDDEN, Fixtures.soloGroups(), m, new SeedScheme(3), "mlp.",
                         new AuxLossScale());
                 AutogradScope scope = AutogradScope.open(m)) {
                NDArray tokens = Fixtures.normal(scope.manager(), 5, 1.0, TOKENS, HIDDEN);
                Routing r = layer.router().route(scope, tokens, SEQ, BATCH);
                assertEquals(config.hasCapacity() ? TokenDropping.capacity(TOKENS, config.topK(), EXPERTS,
                        config.capacityFactor()) : -1, r.capacity());
                return new float[][] {r.probs().toFloatArray(), r.routingMap().toFloatArray(), r.keptMap().toFloatArray()};
            }
        }).get(0);
    }

    static MoeConfig.Builder base() {
        return MoeConfig.builder(EXPERTS, TOP_K, 8).initStd(0.5);
    }

    @Test
    void withoutCapacityEveryTokenHasExactlyKExperts() {
        float[][] r = route(base().build());
        assertEquals(TOKENS * TOP_K, sum(r[1]), "sum of the routing map");
        assertArrayEquals(r[1], r[2], "without capacity every dispatched pair is kept");
        for (int t = 0; t < TOKENS; t++) {
            assertEquals(TOP_K, rowSum(r[1], t), "experts of token " + t);
            assertEquals(1.0, rowSum(r[0], t), 1e-6, "softmax over the top-k sums to 1 for token " + t);
        }
    }

    @ParameterizedTest
    @EnumSource(MoeConfig.DropPolicy.class)
    void droppingKeepsAtMostTheCapacityChosenByThePolicy(MoeConfig.DropPolicy policy) {
        double factor = 0.5; // capacity = ceil(32 * 2 / 8 * 0.5) = 4, and T * k * factor = 32
        float[][] free = route(base().build());
        float[][] r = route(base().capacityFactor(factor).dropPolicy(policy).build());
        long capacity = TokenDropping.capacity(TOKENS, TOP_K, EXPERTS, factor);
        assertEquals(4, capacity);
        assertTrue(sum(r[1]) <= TOKENS * TOP_K * factor, "sum " + sum(r[1]) + " exceeds T k factor");
        assertTrue(sum(r[1]) < TOKENS * TOP_K, "this routing must drop something to test dropping");
        for (int e = 0; e < EXPERTS; e++) {
            assertTrue(columnSum(r[1], e) <= capacity, "expert " + e + " holds " + columnSum(r[1], e));
        }
        boolean[][] selected = toMap(free[1]);
        boolean[][] expected;
        try (NDManager m = NDManager.newBaseManager()) {
            expected = SerialMoe.keep(selected, m.create(free[0], new ai.djl.ndarray.types.Shape(TOKENS, EXPERTS)), capacity,
                    policy, m);
        }
        assertArrayEquals(SerialMoe.toFloats(expected), r[2], "kept pairs under " + policy);
        assertArrayEquals(r[2], r[1], "without padding the dispatched pairs are the kept ones");
        for (int i = 0; i < r[0].length; i++) {
            assertEquals(r[2][i] > 0 ? free[0][i] : 0f, r[0][i], 1e-7f, "probability " + i + " after dropping");
        }
    }

    @ParameterizedTest
    @EnumSource(MoeConfig.DropPolicy.class)
    void paddingGivesEveryExpertExactlyItsCapacity(MoeConfig.DropPolicy policy) {
        float[][] r = route(base().capacityFactor(1.25).dropPolicy(policy).padToCapacity(true).build());
        long capacity = TokenDropping.capacity(TOKENS, TOP_K, EXPERTS, 1.25); // ceil(10) = 10
        assertEquals(EXPERTS * capacity, sum(r[1]), "sum of the padded routing map");
        for (int e = 0; e < EXPERTS; e++) {
            assertEquals(capacity, columnSum(r[1], e), "rows of expert " + e);
        }
        for (int i = 0; i < r[1].length; i++) {
            assertTrue(r[2][i] <= r[1][i], "kept pair " + i + " must be dispatched");
            assertTrue(r[2][i] > 0 || r[0][i] == 0, "padding pair " + i + " must have weight 0");
        }
        assertTrue(sum(r[2]) < sum(r[1]), "this routing must pad something to test padding");
    }

    @Test
    void aCapacityAboveTheTokenCountDropsNothingAndPadsToEveryToken() {
        float[][] r = route(base().capacityFactor(10).padToCapacity(true).build());
        assertEquals(EXPERTS * TOKENS, sum(r[1]), "every expert receives every token");
        assertEquals(TOKENS * TOP_K, sum(r[2]), "nothing is dropped");
    }

    @Test
    void expertBiasMovesTowardUnderloadedExpertsAndCountsAreSummedOverDataParallelRanks() {
        double rate = 0.01;
        MoeConfig config = base().routerScore(MoeConfig.RouterScore.SIGMOID).auxLossFree(true).biasUpdateRate(rate).build();
        List<float[]> results = InJvmWorld.run(2, ctx -> {
            ProcessGroups groups = ctx.groups(ParallelDims.builder(2).build()); // DP2
            try (NDManager m = ctx.manager().newSubManager();
                 MoeLayer layer = MoeLayer.build(config, HIDDEN, groups, m, new SeedScheme(3), "mlp.", new AuxLossScale())) {
                float[] counts;
                try (AutogradScope scope = AutogradScope.open(m)) {
                    NDArray tokens = Fixtures.normal(scope.manager(), 40 + ctx.rank(), 1.0, TOKENS, HIDDEN);
                    Routing r = layer.router().route(scope, tokens, SEQ, BATCH);
                    counts = r.routingMap().sum(new int[] {0}).toFloatArray();
                    assertArrayEquals(counts, layer.router().localTokenCounts().toFloatArray(), "accumulated counts");
                }
                try (AutogradScope noGrad = AutogradScope.openNoGrad(m)) {
                    layer.router().route(noGrad, Fixtures.normal(noGrad.manager(), 9, 1.0, TOKENS, HIDDEN), SEQ, BATCH);
                }
                assertArrayEquals(counts, layer.router().localTokenCounts().toFloatArray(),
                        "a pass without grad (evaluation, first run of a recompute) does not count");
                layer.updateExpertBias();
                assertEquals(0f, sum(layer.router().localTokenCounts().toFloatArray()), "counts are cleared");
                float[] bias = layer.router().expertBias().toFloatArray();
                float[] out = new float[2 * EXPERTS];
                System.arraycopy(counts, 0, out, 0, EXPERTS);
                System.arraycopy(bias, 0, out, EXPERTS, EXPERTS);
                return out;
            }
        });
        float[] total = new float[EXPERTS];
        for (float[] r : results) {
            for (int e = 0; e < EXPERTS; e++) {
                total[e] += r[e];
            }
        }
        float mean = sum(total) / EXPERTS;
        for (int e = 0; e < EXPERTS; e++) {
            float expected = (float) (rate * Math.signum(mean - total[e]));
            for (int rank = 0; rank < 2; rank++) {
                assertEquals(expected, results.get(rank)[EXPERTS + e], 1e-7f, "bias of expert " + e + " on rank " + rank);
            }
        }
    }

    @Test
    void theExpertBiasSteersSelectionButNotTheProbabilities() {
        MoeConfig config = base().routerScore(MoeConfig.RouterScore.SIGMOID).auxLossFree(true).build();
        InJvmWorld.run(1, ctx -> {
            try (NDManager m = ctx.manager().newSubManager();
                 MoeLayer layer = MoeLayer.build(config, HIDDEN, Fixtures.soloGroups(), m, new SeedScheme(3), "mlp.",
                         new AuxLossScale());
                 AutogradScope scope = AutogradScope.open(m)) {
                float[] bias = new float[EXPERTS];
                bias[5] = 10; // beats any sigmoid score difference
                Tensors.copyInto(layer.router().expertBias(), scope.manager().create(bias));
                NDArray tokens = Fixtures.normal(scope.manager(), 5, 1.0, TOKENS, HIDDEN);
                Routing r = layer.router().route(scope, tokens, SEQ, BATCH);
                assertEquals(TOKENS, columnSum(r.routingMap().toFloatArray(), 5), "every token picks the biased expert");
                float[] probs = r.probs().toFloatArray();
                for (int t = 0; t < TOKENS; t++) {
                    assertEquals(1.0, rowSum(probs, t), 1e-6, "renormalised sigmoid scores of token " + t);
                    assertTrue(probs[t * EXPERTS + 5] < 0.99, "the bias must not enter the probability");
                }
            }
            return null;
        });
    }

    @Test
    void inputJitterIsReplayedByTheRandomState() {
        MoeConfig config = base().inputJitter(0.5).build();
        InJvmWorld.run(1, ctx -> {
            try (NDManager m = ctx.manager().newSubManager();
                 MoeLayer layer = MoeLayer.build(config, HIDDEN, Fixtures.soloGroups(), m, new SeedScheme(3), "mlp.",
                         new AuxLossScale());
                 AutogradScope scope = AutogradScope.open(m)) {
                NDArray tokens = Fixtures.normal(scope.manager(), 5, 1.0, TOKENS, HIDDEN);
                Recompute.Replay replay = layer.randomState();
                Object before = replay.capture();
                float[] first = layer.router().route(scope, tokens, SEQ, BATCH).probs().toFloatArray();
                float[] second = layer.router().route(scope, tokens, SEQ, BATCH).probs().toFloatArray();
                replay.restore(before);
                float[] replayed = layer.router().route(scope, tokens, SEQ, BATCH).probs().toFloatArray();
                assertArrayEquals(first, replayed, "restoring the state reproduces the noise");
                assertTrue(!java.util.Arrays.equals(first, second), "fresh noise on the next pass");
            }
            return null;
        });
    }

    private static boolean[][] toMap(float[] flat) {
        boolean[][] out = new boolean[TOKENS][EXPERTS];
        for (int t = 0; t < TOKENS; t++) {
            for (int e = 0; e < EXPERTS; e++) {
                out[t][e] = flat[t * EXPERTS + e] > 0;
            }
        }
        return out;
    }

    static float sum(float[] values) {
        float s = 0;
        for (float v : values) {
            s += v;
        }
        return s;
    }

    private static float rowSum(float[] flat, int row) {
        float s = 0;
        for (int e = 0; e < EXPERTS; e++) {
            s += flat[row * EXPERTS + e];
        }
        return s;
    }

    private static float columnSum(float[] flat, int col) {
        float s = 0;
        for (int t = 0; t < flat.length / EXPERTS; t++) {
            s += flat[t * EXPERTS + col];
        }
        return s;
    }
}
