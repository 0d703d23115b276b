package io.mcore4j.core.autograd;

import static io.mcore4j.core.testing.NativeArrays.assertClose;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import ai.djl.nn.Activation;
import ai.djl.nn.norm.LayerNorm;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.random.DeterministicRandom;
import io.mcore4j.core.testing.NativeArrays;

import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

class AutogradScopeTest {
    private static NDManager root;

    @BeforeAll
    static void setUp() {
        root = Mcore4j.newRootManager();
    }

    @AfterAll
    static void tearDown() {
        root.close();
    }

    /**
     * A random DAG over matmul, gelu, layer norm, residual adds and branches, run once as one
     * libtorch graph and once cut at random points by identity Functions: every parameter and input
     * gradient must agree.
     */
    @Test
    void randomDagsMatchTheUncutGraphInFloat64() {
        for (int seed = 0; seed < 25; seed++) {
            checkRandomDag(seed, DataType.FLOAT64, 1e-12);
        }
    }

    @Test
    void randomDagsMatchTheUncutGraphInFloat32() {
        for (int seed = 100; seed < 125; seed++) {
            checkRandomDag(seed, DataType.FLOAT32, 1e-6);
        }
    }

    private void checkRandomDag(int seed, DataType dtype, double tolerance) {
        try (NDManager m = root.newSubManager()) {
            int width = 6;
            DeterministicRandom init = new DeterministicRandom(seed);
            NDArray x = init.normal(m, new Shape(4, width), 0, 1, dtype);
            List<NDArray> weights = new ArrayList<>();
            for (int i = 0; i < 6; i++) {
                weights.add(init.normal(m, new Shape(width, width), 0, 0.5, dtype));
            }
            NDArray gamma = init.normal(m, new Shape(width), 1, 0.1, dtype);
            NDArray beta = init.normal(m, new Shape(width), 0, 0.1, dtype);
            List<NDArray> leaves = new ArrayList<>(weights);
            leaves.add(gamma);
            leaves.add(beta);
            leaves.add(x);

            List<NDArray> reference = gradients(m, seed, x, weights, gamma, beta, leaves, 0.0);
            List<NDArray> cut = gradients(m, seed, x, weights, gamma, beta, leaves, 0.6);
            for (int i = 0; i < leaves.size(); i++) {
                // relative to the gradient's magnitude: summation order differs between the two runs
                double rel = NativeArrays.maxRelDiff(cut.get(i), reference.get(i));
                assertTrue(rel <= tolerance, "seed " + seed + " leaf " + i + ": relative difference " + rel);
            }
        }
    }

    /** Runs forward/backward of the DAG chosen by {@code seed}; cuts with probability {@code cutProbability}. */
    private List<NDArray> gradients(NDManager m, int seed, NDArray x, List<NDArray> weights, NDArray gamma,
                                    NDArray beta, List<NDArray> leaves, double cutProbability) {
        for (NDArray leaf : leaves) {
            leaf.setRequiresGradient(true);
            Tensors.zeroGradient(leaf);
        }
        Random structure = new Random(seed);
        Random cuts = new Random(seed * 31L + 7);
        Function identity = new IdentityFunction();
        try (AutogradScope scope = AutogradScope.open(m)) {
            List<NDArray> nodes = new ArrayList<>();
            nodes.add(x);
            for (int step = 0; step < 12; step++) {
                NDArray a = nodes.get(structure.nextInt(nodes.size()));
                NDArray next;
                switch (structure.nextInt(5)) {
                    case 0 -> next = a.matMul(weights.get(structure.nextInt(weights.size())));
                    case 1 -> next = Activation.gelu(a);
                    case 2 -> next = LayerNorm.layerNorm(a, new Shape(a.getShape().get(1)), gamma, beta, 1e-5f).get(0);
                    case 3 -> next = a.add(nodes.get(structure.nextInt(nodes.size())));
                    default -> next = Tensors.scale(a, 0.5, scope.manager()).add(a.matMul(weights.get(structure.nextInt(weights.size()))));
                }
                if (cuts.nextDouble() < cutProbability) {
                    next = scope.apply1(identity, next);
                }
                nodes.add(next);
            }
            NDArray loss = nodes.get(nodes.size() - 1).sum()
                    .add(nodes.get(nodes.size() / 2).mul(nodes.get(nodes.size() / 2)).sum());
            scope.backward(loss);
            List<NDArray> grads = new ArrayList<>();
            for (NDArray leaf : leaves) {
                NDArray g = Tensors.gradientOrZeros(leaf, m).duplicate();
                g.attach(m);
                grads.add(g);
            }
            return grads;
        }
    }

    /** Two inputs (one not requiring grad), two outputs (one unused), an integer output. */
    @Test
    void multipleInputsAndOutputsUnusedOutputsAndNonDifferentiableInputs() {
        try (NDManager m = root.newSubManager()) {
            NDArray a = m.create(new double[] {1, 2, 3});
            NDArray b = m.create(new double[] {4, 5, 6});
            NDArray constant = m.create(new double[] {10, 20, 30});
            a.setRequiresGradient(true);
            b.setRequiresGradient(true);
            Function split = new Function() {
                @Override
                public NDArray[] forward(FunctionContext ctx, NDArray... in) {
                    ctx.saveForBackward(in[1]);
                    return new NDArray[] {in[0].mul(in[1]), in[0].add(1), ctx.manager().create(new int[] {7})};
                }

                @Override
                public NDArray[] backward(FunctionContext ctx, NDArray... g) {
                    assertEquals(3, g.length);
                    assertNull(g[2], "integer outputs get no gradient");
                    assertTrue(ctx.needsInputGrad(0));
                    assertTrue(!ctx.needsInputGrad(1), "a constant input needs no gradient");
                    return new NDArray[] {g[0].mul(ctx.saved(0)).add(g[1]), null};
                }
            };
            try (AutogradScope scope = AutogradScope.open(m)) {
                NDArray y = a.mul(b); // a*b, graph to a and b
                NDArray[] out = scope.apply(split, y, constant);
                assertEquals(DataType.INT32, out[2].getDataType());
                // out[1] is unused: its gradient is zero
                NDArray loss = out[0].sum();
                scope.backward(loss);
                // loss = sum(a*b*c): dA = b*c, dB = a*c
                assertClose("grad a", a.getGradient(), m.create(new double[] {40, 100, 180}), 0);
                assertClose("grad b", b.getGradient(), m.create(new double[] {10, 40, 90}), 0);
            }
        }
    }

    /** A tensor consumed by two later Functions and directly by the loss (residual). */
    @Test
    void gradientsFromSeveralConsumersAccumulateBeforeTheProducerRuns() {
        try (NDManager m = root.newSubManager()) {
            NDArray w = m.create(new double[] {2, 3});
            w.setRequiresGradient(true);
            List<Integer> order = new ArrayList<>();
            Function scaleBy10 = new Function() {
                @Override
                public NDArray[] forward(FunctionContext ctx, NDArray... in) {
                    return new NDArray[] {in[0].mul(10)};
                }

                @Override
                public NDArray[] backward(FunctionContext ctx, NDArray... g) {
                    order.add(10);
                    return new NDArray[] {g[0].mul(10)};
                }
            };
            Function producer = new Function() {
                @Override
                public NDArray[] forward(FunctionContext ctx, NDArray... in) {
                    return new NDArray[] {in[0].mul(1)};
                }

                @Override
                public NDArray[] backward(FunctionContext ctx, NDArray... g) {
                    order.add(1);
                    // by now all three consumers have contributed: 1 (residual) + 10 + 10 per element, times 2 from square
                    return new NDArray[] {g[0]};
                }
            };
            try (AutogradScope scope = AutogradScope.open(m)) {
                NDArray h = scope.apply1(producer, w.mul(w)); // h = w^2
                NDArray r1 = scope.apply1(scaleBy10, h);
                NDArray r2 = scope.apply1(scaleBy10, h.mul(1));
                NDArray loss = r1.add(r2).add(h).sum(); // 21 * w^2
                scope.backward(loss);
                assertEquals(List.of(10, 10, 1), order);
                assertClose("grad w", w.getGradient(), m.create(new double[] {84, 126}), 0);
            }
        }
    }

    /**
     * A function's input whose gradient it defers ({@link FunctionContext#deferInputGradients}) has its backward run
     * with a later traversal, after the next function's backward (here the final one, with the leaf's), not before
     * it; the gradients are the same either way.
     */
    @Test
    void deferredInputGradientsJoinALaterTraversalWithTheSameGradients() {
        for (boolean defer : new boolean[] {false, true}) {
            try (NDManager m = root.newSubManager()) {
                NDArray x = m.create(new double[] {1, 2});
                x.setRequiresGradient(true);
                NDArray p = m.create(new double[] {3, 5});
                p.setRequiresGradient(true);
                boolean[] parameterHadGradient = new boolean[1];
                Function doubling = new Function() {
                    @Override
                    public NDArray[] forward(FunctionContext ctx, NDArray... in) {
                        return new NDArray[] {in[0].mul(2)};
                    }

                    @Override
                    public NDArray[] backward(FunctionContext ctx, NDArray... g) {
                        parameterHadGradient[0] = Tensors.gradientOrNull(p, ctx.manager()) != null;
                        return new NDArray[] {g[0].mul(2)};
                    }
                };
                try (AutogradScope scope = AutogradScope.open(m)) {
                    NDArray out = scope.apply1(new Product(defer), scope.apply1(doubling, x), p.mul(1.5));
                    scope.backward(out.sum());
                }
                assertEquals(!defer, parameterHadGradient[0], "deferred: " + defer);
                assertClose("grad p, deferred " + defer, p.getGradient(), m.create(new double[] {3, 6}), 0);
                assertClose("grad x, deferred " + defer, x.getGradient(), m.create(new double[] {9, 15}), 0);
            }
        }
    }

    /** The product of two inputs; {@code deferSecond}: the second input's gradient may wait for a later traversal. */
    private record Product(boolean deferSecond) implements Function {
        @Override
        public NDArray[] forward(FunctionContext ctx, NDArray... in) {
            if (deferSecond) {
                ctx.deferInputGradients(1);
            }
            ctx.saveForBackward(in[0], in[1]);
            return new NDArray[] {in[0].mul(in[1])};
        }

        @Override
        public NDArray[] backward(FunctionContext ctx, NDArray... g) {
            return new NDArray[] {g[0].mul(ctx.saved(1)), g[0].mul(ctx.saved(0))};
        }
    }

    /**
     * A MoE layer's shape: a fork (identity Function) whose output feeds a libtorch block {@code t = 3h}, from which
     * the "routing" {@code probs = t²} (libtorch) and a Function {@code d = 2t} (the dispatch) are made, combined by a
     * Function {@code d · probs}. The probabilities' gradient, from the combine's backward, waits past the dispatch's
     * backward when they are noted as made before it ({@link AutogradScope#markMade}), and joins the traversal of
     * the dispatch's gradient before the fork's; without the note it runs before the dispatch's. Both give
     * {@code d(54 x³)/dx}.
     */
    @Test
    void aGradientOfATensorMadeBeforeAFunctionWaitsPastThatFunctionsBackward() {
        for (boolean mark : new boolean[] {false, true}) {
            try (NDManager m = root.newSubManager()) {
                NDArray x = m.create(new double[] {1, 2});
                x.setRequiresGradient(true);
                NDArray[] forkOutput = new NDArray[1];
                boolean[] forkOutputHadGradient = new boolean[1];
                Function dispatch = new Function() {
                    @Override
                    public NDArray[] forward(FunctionContext ctx, NDArray... in) {
                        return new NDArray[] {in[0].mul(2)};
                    }

                    @Override
                    public NDArray[] backward(FunctionContext ctx, NDArray... g) {
                        forkOutputHadGradient[0] = Tensors.gradientOrNull(forkOutput[0], ctx.manager()) != null;
                        return new NDArray[] {g[0].mul(2)};
                    }
                };
                try (AutogradScope scope = AutogradScope.open(m)) {
                    forkOutput[0] = scope.apply1(new IdentityFunction(), x);
                    NDArray t = forkOutput[0].mul(3);
                    NDArray probs = t.mul(t);
                    if (mark) {
                        scope.markMade(probs);
                    }
                    NDArray out = scope.apply1(new Product(false), scope.apply1(dispatch, t), probs);
                    scope.backward(out.sum());
                }
                assertEquals(!mark, forkOutputHadGradient[0], "noted: " + mark);
                assertClose("grad x, noted " + mark, x.getGradient(), m.create(new double[] {162, 648}), 1e-12);
            }
        }
    }

    /**
     * Upstream gradients of recorded functions' outputs go to their producers directly (not through
     * libtorch): a caller's gradient handed on by a chain of identities reaches the leaf below with its
     * values, and stays the caller's (the scope does not close it).
     */
    @Test
    void callersGradientOfARecordedOutputIsHandedOnAndStaysOpen() {
        try (NDManager m = root.newSubManager()) {
            NDArray x = m.create(new double[] {1, 2, 3});
            x.setRequiresGradient(true);
            NDArray upstream = m.create(new double[] {0.5, -1, 4});
            try (AutogradScope scope = AutogradScope.open(m)) {
                Function identity = new IdentityFunction();
                NDArray y = scope.apply1(identity, scope.apply1(identity, x.mul(x)));
                scope.backward(new NDArray[] {y}, new NDArray[] {upstream});
            }
            assertFalse(upstream.isReleased(), "the caller's upstream gradient was closed");
            assertClose("upstream", upstream, m.create(new double[] {0.5, -1, 4}), 0);
            assertClose("grad x", x.getGradient(), m.create(new double[] {1, -4, 24}), 0);
        }
    }

    /** Parameters used in several segments; repeated steps accumulate until zeroed; nothing leaks. */
    @Test
    void repeatedStepsAccumulateAndReleaseEverything() {
        try (NDManager params = root.newSubManager()) {
            NDArray w = params.create(new float[] {1, 2, 3, 4}, new Shape(2, 2));
            w.setRequiresGradient(true);
            Function identity = new IdentityFunction();
            int baseline = -1;
            for (int step = 0; step < 200; step++) {
                try (AutogradScope scope = AutogradScope.open(params)) {
                    NDArray x = scope.manager().ones(new Shape(3, 2));
                    NDArray h = scope.apply1(identity, x.matMul(w));
                    NDArray out = scope.apply1(identity, h.matMul(w)).add(h);
                    scope.backward(out.sum());
                }
                if (step == 0) {
                    NDArray g = w.getGradient();
                    // d/dw sum(x w w + x w) for x = ones(3,2): (x w)^T 1 + x^T (1 w^T) + x^T 1
                    assertClose("first-step gradient", g, params.create(new float[] {24, 36, 30, 42}, new Shape(2, 2)), 1e-6);
                    g.close();
                    Tensors.zeroGradient(w);
                }
                if (step > 0) {
                    Tensors.zeroGradient(w);
                }
                if (step == 1) {
                    baseline = NativeArrays.live(params);
                }
            }
            assertEquals(baseline, NativeArrays.live(params), "live native arrays grew over 200 steps");
        }
    }

    /** Four threads run forward/backward at the same time, each its own scope and grad mode. */
    @Test
    void scopesOnSeveralThreadsAreIndependent() throws Exception {
        ExecutorService pool = Executors.newFixedThreadPool(4);
        try {
            List<Future<double[]>> results = new ArrayList<>();
            for (int t = 0; t < 4; t++) {
                final int rank = t;
                results.add(pool.submit(() -> {
                    try (NDManager m = root.newSubManager()) {
                        NDArray w = m.create(new double[] {rank + 1.0, 2.0});
                        w.setRequiresGradient(true);
                        for (int i = 0; i < 50; i++) {
                            try (AutogradScope scope = AutogradScope.open(m)) {
                                NDArray y = scope.apply1(new IdentityFunction(), w.mul(w));
                                scope.backward(y.sum());
                            }
                        }
                        return w.getGradient().toDoubleArray();
                    }
                }));
            }
            for (int t = 0; t < 4; t++) {
                double[] g = results.get(t).get();
                assertEquals(50 * 2.0 * (t + 1), g[0], 1e-9);
                assertEquals(50 * 4.0, g[1], 1e-9);
            }
        } finally {
            pool.shutdownNow();
        }
    }

    @Test
    void misuseIsReported() {
        try (NDManager m = root.newSubManager()) {
            try (AutogradScope scope = AutogradScope.openNoGrad(m)) {
                NDArray w = m.create(new float[] {1});
                w.setRequiresGradient(true);
                NDArray y = scope.apply1(new IdentityFunction(), w);
                assertEquals(0, scope.recordedFunctions(), "no-grad scopes record nothing");
                assertThrows(IllegalStateException.class, () -> scope.backward(y));
            }
            AutogradScope scope = AutogradScope.open(m);
            NDArray plain = scope.manager().ones(new Shape(2));
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> scope.backward(plain));
            assertTrue(e.getMessage().contains("does not require grad"), e.getMessage());
            scope.close();
            assertThrows(IllegalStateException.class, () -> scope.apply1(new IdentityFunction(), plain));
        }
    }

    /**
     * Training is a property of the pass, apart from grad mode: a training scope's recomputed body
     * runs as training without grad, then as training with grad; under an evaluation scope it runs
     * once, neither.
     */
    @Test
    void recomputedRunsInheritTrainingNotGradMode() {
        try (NDManager m = root.newSubManager()) {
            List<String> seen = new ArrayList<>();
            Recompute.Body body = (scope, in) -> {
                seen.add("grad=" + scope.isGradEnabled() + " training=" + scope.isTraining());
                return new NDArray[] {in[0].mul(in[0])};
            };
            NDArray x = m.create(new double[] {1, 2, 3});
            x.setRequiresGradient(true);
            try (AutogradScope scope = AutogradScope.open(m)) {
                assertTrue(scope.isGradEnabled() && scope.isTraining());
                NDArray y = scope.apply1(new Recompute("recompute", body, Recompute.Replay.NONE), x);
                assertEquals(List.of("grad=false training=true"), seen, "first run");
                scope.backward(y.sum());
            }
            assertEquals(List.of("grad=false training=true", "grad=true training=true"), seen, "first run and rerun");
            assertClose("gradient of sum(x * x)", x.getGradient(), m.create(new double[] {2, 4, 6}), 0);
            seen.clear();
            try (AutogradScope scope = AutogradScope.openNoGrad(m)) {
                assertTrue(!scope.isGradEnabled() && !scope.isTraining());
                scope.apply1(new Recompute("recompute", body, Recompute.Replay.NONE), x);
            }
            assertEquals(List.of("grad=false training=false"), seen, "evaluation");
        }
    }

    /** Recompute gives the same gradients as running the body directly, with a Function and a dropout mask inside. */
    @Test
    void recomputeGivesIdenticalGradients() {
        try (NDManager m = root.newSubManager()) {
            DeterministicRandom init = new DeterministicRandom(7);
            NDArray w = init.normal(m, new Shape(5, 5), 0, 0.5, DataType.FLOAT64);
            NDArray x = init.normal(m, new Shape(3, 5), 0, 1, DataType.FLOAT64);
            w.setRequiresGradient(true);
            x.setRequiresGradient(true);
            DeterministicRandom dropout = new DeterministicRandom(99);
            Recompute.Body body = (scope, in) -> {
                NDArray h = scope.apply1(new IdentityFunction(), Activation.gelu(in[0].matMul(w)));
                NDArray mask = dropout.keepMask(scope.manager(), h.getShape(), 0.3, DataType.FLOAT64);
                return new NDArray[] {h.mul(mask).matMul(w)};
            };
            Recompute.Replay replay = new Recompute.Replay() {
                @Override
                public Object capture() {
                    return dropout.state();
                }

                @Override
                public void restore(Object token) {
                    dropout.restore((Long) token);
                }
            };
            double[][] grads = new double[2][];
            for (int run = 0; run < 2; run++) {
                Tensors.zeroGradient(w);
                Tensors.zeroGradient(x);
                dropout.restore(0);
                try (AutogradScope scope = AutogradScope.open(m)) {
                    NDArray y = run == 0
                            ? body.run(scope, x)[0]
                            : scope.apply1(new Recompute("recompute", body, replay), x);
                    scope.backward(y.mul(y).sum());
                }
                NDArray gw = Tensors.gradientOrZeros(w, m);
                NDArray gx = Tensors.gradientOrZeros(x, m);
                grads[run] = gw.concat(gx.reshape(-1, 5)).toDoubleArray();
            }
            for (int i = 0; i < grads[0].length; i++) {
                assertEquals(grads[0][i], grads[1][i], 1e-12, "element " + i);
            }
        }
    }
}
