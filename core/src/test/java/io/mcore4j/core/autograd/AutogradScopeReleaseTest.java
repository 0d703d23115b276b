package io.mcore4j.core.autograd;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.random.DeterministicRandom;
import io.mcore4j.core.testing.NativeArrays;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** {@link AutogradScope#release}: what it closes, what it leaves open, and that gradients do not change. */
class AutogradScopeReleaseTest {
    private static NDManager root;

    @BeforeAll
    static void setUp() {
        root = Mcore4j.newRootManager();
    }

    @AfterAll
    static void tearDown() {
        root.close();
    }

    /** A Function that squares its input and saves the input handle it was given. */
    private static final class Square implements Function {
        @Override
        public NDArray[] forward(FunctionContext ctx, NDArray... inputs) {
            ctx.saveForBackward(inputs[0]);
            NDArray out = inputs[0].mul(inputs[0]);
            out.attach(ctx.manager());
            return new NDArray[] {out};
        }

        @Override
        public NDArray[] backward(FunctionContext ctx, NDArray... gradOutputs) {
            NDArray twice = ctx.saved(0).add(ctx.saved(0));
            NDArray g = gradOutputs[0].mul(twice);
            g.attach(ctx.manager());
            twice.close();
            return new NDArray[] {g};
        }
    }

    @Test
    void closesPlainIntermediatesAndIgnoresNullsAndRepeats() {
        try (AutogradScope scope = AutogradScope.open(root)) {
            NDArray a = scope.manager().ones(new Shape(4));
            NDArray b = a.add(a);
            NDArray c = b.exp();
            assertEquals(2, scope.release(a, null, b, a));
            assertTrue(a.isReleased());
            assertTrue(b.isReleased());
            assertFalse(c.isReleased());
            assertEquals(0, scope.release((NDArray) null));
        }
    }

    @Test
    void leavesFunctionInputsAndOutputsTensorsOfOtherManagersAndParametersOpen() {
        try (NDManager params = root.newSubManager()) {
            NDArray w = params.ones(new Shape(3));
            w.setRequiresGradient(true);
            try (AutogradScope scope = AutogradScope.open(root)) {
                NDArray in = w.mul(scope.manager().full(new Shape(3), 2f));
                in.attach(scope.manager());
                NDArray out = scope.apply1(new Square(), in);
                NDArray same = scope.apply1(new IdentityFunction(), out);
                assertEquals(0, scope.release(w, in, out, same));
                assertFalse(w.isReleased(), "a parameter in another manager");
                assertFalse(in.isReleased(), "a Function input");
                assertFalse(out.isReleased(), "a Function output (and input of the next)");
                assertFalse(same.isReleased(), "a Function output");

                scope.backward(same.sum());
                // d/dw sum((2w)^2) = 8w = 8; the references end with backward
                assertArrayEquals(new float[] {8, 8, 8}, Tensors.gradientOrZeros(w, scope.manager()).toFloatArray());
                assertEquals(3, scope.release(in, out, same));
                assertFalse(w.isReleased());
            }
        }
    }

    /**
     * Releasing every intermediate of a graph that mixes libtorch ops (which save tensors for
     * backward) and Functions gives bitwise the gradients of a run that releases nothing.
     */
    @Test
    void releasingEveryIntermediateKeepsGradientsBitwise() {
        try (NDManager m = root.newSubManager()) {
            DeterministicRandom init = new DeterministicRandom(11);
            NDArray w1 = init.normal(m, new Shape(6, 6), 0, 0.5, DataType.FLOAT32);
            NDArray w2 = init.normal(m, new Shape(6, 6), 0, 0.5, DataType.FLOAT32);
            NDArray x = init.normal(m, new Shape(4, 6), 0, 1, DataType.FLOAT32);
            for (NDArray p : new NDArray[] {w1, w2, x}) {
                p.setRequiresGradient(true);
            }
            float[][] grads = new float[2][];
            for (int run = 0; run < 2; run++) {
                boolean release = run == 1;
                for (NDArray p : new NDArray[] {w1, w2, x}) {
                    Tensors.zeroGradient(p);
                }
                try (AutogradScope scope = AutogradScope.open(m)) {
                    NDArray h = x.matMul(w1);            // saves x and w1
                    h.attach(scope.manager());
                    NDArray t = h.tanh();                // saves its output
                    NDArray sq = scope.apply1(new Square(), t);
                    NDArray sq32 = Cast.apply(scope, sq, DataType.FLOAT64);
                    NDArray back = Cast.apply(scope, sq32, DataType.FLOAT32);
                    NDArray residual = back.add(h);      // saves nothing
                    NDArray y = residual.matMul(w2);
                    NDArray loss = y.mul(y).sum();
                    if (release) {
                        int closed = scope.release(h, t, sq, sq32, back, residual, y);
                        // h and residual and y are plain; t, sq, sq32, back belong to recorded Functions
                        assertEquals(3, closed);
                        assertTrue(h.isReleased() && residual.isReleased() && y.isReleased());
                        assertFalse(t.isReleased() || sq.isReleased() || sq32.isReleased() || back.isReleased());
                    }
                    scope.backward(loss);
                    NDArray all = Tensors.gradientOrZeros(w1, m).concat(Tensors.gradientOrZeros(w2, m))
                            .concat(Tensors.gradientOrZeros(x, m));
                    grads[run] = all.toFloatArray();
                }
            }
            assertArrayEquals(grads[0], grads[1], "gradients with and without release");
        }
    }

    /**
     * Recompute gives its body inputs owned by an inner scope: what the body creates during the
     * forward run is gone when the run ends (the outer scope grows by the same count whatever the
     * body's length), and a body that releases its intermediates gets the gradients of the plain run.
     */
    @Test
    void recomputeBodiesKeepTheirIntermediatesOutOfTheOuterScopeAndMayReleaseThem() {
        try (NDManager m = root.newSubManager()) {
            DeterministicRandom init = new DeterministicRandom(5);
            NDArray w = init.normal(m, new Shape(5, 5), 0, 0.5, DataType.FLOAT64);
            NDArray x = init.normal(m, new Shape(3, 5), 0, 1, DataType.FLOAT64);
            w.setRequiresGradient(true);
            x.setRequiresGradient(true);
            int[] growth = new int[2];
            double[][] grads = new double[3][];
            for (int run = 0; run < 3; run++) {
                int steps = run == 0 ? 2 : 12;
                boolean release = run == 2;
                Recompute.Body body = (scope, in) -> {
                    NDArray h = in[0];
                    for (int i = 0; i < steps; i++) {
                        NDArray next = scope.apply1(new IdentityFunction(), h.matMul(w).tanh());
                        if (release && h != in[0]) {
                            scope.release(h);
                        }
                        h = next;
                    }
                    return new NDArray[] {h};
                };
                Tensors.zeroGradient(w);
                Tensors.zeroGradient(x);
                try (AutogradScope scope = AutogradScope.open(m)) {
                    NDArray input = x.matMul(w); // an activation of the outer pass
                    input.attach(scope.manager());
                    int before = NativeArrays.live(scope.manager());
                    NDArray y = scope.apply1(new Recompute("recompute", body, Recompute.Replay.NONE), input);
                    if (run < 2) {
                        growth[run] = NativeArrays.live(scope.manager()) - before;
                    }
                    scope.backward(y.mul(y).sum());
                    grads[run] = Tensors.gradientOrZeros(w, m).concat(Tensors.gradientOrZeros(x, m).reshape(-1, 5))
                            .toDoubleArray();
                }
            }
            assertEquals(growth[0], growth[1], "outer-scope arrays after a 2-op and a 12-op recomputed body");
            assertArrayEquals(grads[1], grads[2], "gradients of a releasing body");
        }
    }
}
