package io.mcore4j.tensorparallel;

import static io.mcore4j.tensorparallel.Fixtures.grad;
import static io.mcore4j.tensorparallel.Fixtures.leaf;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDArrays;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.TensorMemory;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.testing.NativeArrays;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * {@link VocabParallelCrossEntropy}'s kernel path (one tensor-parallel rank, no smoothing: a
 * {@code CrossEntropyKernel} found for the device, on CUDA mcore4j's own, here
 * {@link ReferenceCrossEntropy}) against its composed path (libtorch's log-softmax): the same
 * per-token losses and logits' gradients to float32 rounding, for int64 and int32 targets, strided
 * targets, upstream gradients that come from a mean, a masked mean or a strided tensor,
 * {@code [s, b, V]} and {@code [tokens, V]} logits, float32 and float16. The kernel runs exactly
 * once each way there; logits it refuses and label smoothing keep the composed path; no pass leaks a
 * native array.
 */
class CrossEntropyKernelPathTest {
    private static final int S = 5;
    private static final int B = 3;
    private static final int V = 16;

    /**
     * How the upstream gradient of the per-token losses is made. Whatever its layout, libtorch's
     * {@code AccumulateGrad} gives the losses' {@code .grad} their own (contiguous) strides before the
     * Function's backward reads it, so these check that the values reach the right tokens.
     */
    enum Upstream {
        /** A random contiguous {@code [s, b]} gradient handed to backward. */
        RANDOM,
        /** A random gradient that is a strided view (a transpose or a column). */
        STRIDED,
        /** {@code loss.mean()}: libtorch's gradient is an expanded scalar. */
        MEAN,
        /** Megatron's {@code sum(loss · mask) / sum(mask)} with some tokens masked out. */
        MASKED_MEAN
    }

    /** One pass's results copied to the heap, and what the reference kernel did during it. */
    private record Pass(Shape lossShape, float[] loss, DataType gradType, Shape gradShape, float[] grad,
                        int forwards, int refusals, int backwards) {}

    /** Builds the inputs in {@code m}, computes the per-token losses and back-propagates; returns {leaf, losses}. */
    @FunctionalInterface
    private interface Body {
        NDArray[] run(AutogradScope scope, Communicator tp, NDManager m);
    }

    @ParameterizedTest(name = "{0}-D {1} logits, {2} target, strided target {3}, upstream {4}")
    @CsvSource({
        "3, FLOAT32, INT64, false, RANDOM",
        "3, FLOAT32, INT32, false, RANDOM",
        "3, FLOAT32, INT64, true, RANDOM",
        "3, FLOAT32, INT32, true, RANDOM",
        "3, FLOAT32, INT64, false, STRIDED",
        "3, FLOAT32, INT64, false, MEAN",
        "3, FLOAT32, INT32, true, MASKED_MEAN",
        "2, FLOAT32, INT64, false, RANDOM",
        "2, FLOAT32, INT32, true, STRIDED",
        "2, FLOAT32, INT64, true, MEAN",
        "3, FLOAT16, INT64, true, MASKED_MEAN",
        "2, FLOAT16, INT32, false, RANDOM"})
    void theKernelPathGivesTheComposedLossesAndGradients(int dims, DataType dtype, DataType targetType,
                                                         boolean stridedTarget, Upstream upstream) {
        Body body = (scope, tp, m) -> {
            Shape rows = dims == 3 ? new Shape(S, B) : new Shape(S * B);
            Shape shape = dims == 3 ? new Shape(S, B, V) : new Shape(S * B, V);
            NDArray logits = leaf(Initializers.normal(2.0, 71).create(m, shape, dtype), m);
            NDArray target = targets(m, rows, targetType, stridedTarget);
            NDArray loss = VocabParallelCrossEntropy.lossPerToken(scope, tp, logits, target, 0.0);
            backward(scope, m, loss, upstream);
            return new NDArray[] {logits, loss};
        };
        Pass composed = pass(false, true, body);
        Pass kernel = pass(true, true, body);
        assertEquals(0, composed.forwards() + composed.refusals() + composed.backwards(), "the kernel is off");
        assertEquals(1, kernel.forwards(), "kernel forward passes");
        assertEquals(0, kernel.refusals(), "kernel refusals");
        assertEquals(1, kernel.backwards(), "kernel backward passes");
        // both paths compute in float32, in another order of additions (measured: losses within
        // 4.8e-7, float32 gradients within 1.2e-7, float16 gradients equal)
        double gradTolerance = dtype == DataType.FLOAT32 ? 5e-7 : 5e-4;
        assertAgree(composed, kernel, 1e-6, gradTolerance);
        assertEquals(dtype, kernel.gradType(), "gradient dtype");
    }

    /** Float32 rows of 40 bytes, and strided logits, are refused by the kernel (as on CUDA): the composed path runs. */
    @Test
    void logitsTheKernelRefusesTakeTheComposedPath() {
        Body narrowRows = (scope, tp, m) -> {
            NDArray logits = leaf(Initializers.normal(2.0, 73).create(m, new Shape(S, B, 10), DataType.FLOAT32), m);
            NDArray target = m.arange(0, S * B, 1, DataType.INT64).mod(10).reshape(S, B);
            NDArray loss = VocabParallelCrossEntropy.lossPerToken(scope, tp, logits, target, 0.0);
            backward(scope, m, loss, Upstream.RANDOM);
            return new NDArray[] {logits, loss};
        };
        Body stridedLogits = (scope, tp, m) -> {
            NDArray leaf = leaf(Initializers.normal(2.0, 74).create(m, new Shape(B, S, V), DataType.FLOAT32), m);
            NDArray logits = leaf.transpose(1, 0, 2);
            assertFalse(TensorMemory.isContiguous(logits), "the logits are a strided view");
            NDArray loss = VocabParallelCrossEntropy.lossPerToken(scope, tp, logits, targets(m, new Shape(S, B), DataType.INT64, false), 0.0);
            backward(scope, m, loss, Upstream.MEAN);
            return new NDArray[] {leaf, loss};
        };
        for (Body body : new Body[] {narrowRows, stridedLogits}) {
            Pass composed = pass(false, true, body);
            Pass offered = pass(true, true, body);
            assertEquals(1, offered.refusals(), "the kernel refused");
            assertEquals(0, offered.forwards() + offered.backwards(), "the kernel computed nothing");
            assertAgree(composed, offered, 0, 0);
        }
    }

    /** With label smoothing the kernel is not asked (it computes plain cross-entropy only). */
    @Test
    void labelSmoothingKeepsTheComposedPath() {
        Body body = (scope, tp, m) -> {
            NDArray logits = leaf(Initializers.normal(2.0, 75).create(m, new Shape(S, B, V), DataType.FLOAT32), m);
            NDArray loss = VocabParallelCrossEntropy.lossPerToken(scope, tp, logits, targets(m, new Shape(S, B), DataType.INT64, false), 0.1);
            backward(scope, m, loss, Upstream.RANDOM);
            return new NDArray[] {logits, loss};
        };
        Pass composed = pass(false, true, body);
        Pass offered = pass(true, true, body);
        assertEquals(0, offered.forwards() + offered.refusals() + offered.backwards(), "the kernel was not asked");
        assertAgree(composed, offered, 0, 0);
    }

    /** Without grad (nothing to save) the kernel gives the losses, from strided int32 targets. */
    @Test
    void withoutGradTheKernelGivesTheLosses() {
        Body body = (scope, tp, m) -> {
            NDArray logits = Initializers.normal(2.0, 76).create(m, new Shape(S, B, V), DataType.FLOAT32);
            NDArray target = targets(m, new Shape(S, B), DataType.INT32, true);
            return new NDArray[] {logits, VocabParallelCrossEntropy.lossPerToken(scope, tp, logits, target, 0.0)};
        };
        Pass composed = pass(false, false, body);
        Pass kernel = pass(true, false, body);
        assertEquals(1, kernel.forwards(), "kernel forward passes");
        assertEquals(0, kernel.backwards(), "kernel backward passes");
        assertNull(kernel.grad(), "no gradient");
        assertAgree(composed, kernel, 1e-6, 0);
    }

    /**
     * Target ids {@code (7·i + 3) mod V} for token {@code i} in row-major order of {@code rows} (0 and
     * {@code V − 1} among them), contiguous or as a {@link #strided} view.
     */
    private static NDArray targets(NDManager m, Shape rows, DataType dtype, boolean strided) {
        NDArray ids = m.arange(0, (int) rows.size(), 1, DataType.INT64).mul(7).add(3).mod(V).reshape(rows);
        return (strided ? strided(ids, m) : ids).toType(dtype, false);
    }

    /**
     * The values of contiguous {@code x} through a non-contiguous view: the transpose of a contiguous
     * {@code [b, s]} tensor for {@code [s, b]}, the first column of a {@code [tokens, 2]} one for one dim.
     */
    private static NDArray strided(NDArray x, NDManager m) {
        NDArray view = x.getShape().dimension() == 2
                ? TensorMemory.contiguous(x.transpose(1, 0), m).transpose(1, 0)
                : NDArrays.stack(new NDList(x, x.zerosLike()), 1).get(":, 0");
        assertFalse(TensorMemory.isContiguous(view), "a strided view of shape " + x.getShape());
        return view;
    }

    private static void backward(AutogradScope scope, NDManager m, NDArray loss, Upstream upstream) {
        Shape rows = loss.getShape();
        switch (upstream) {
            case RANDOM -> scope.backward(new NDArray[] {loss},
                    new NDArray[] {Initializers.normal(1.0, 72).create(m, rows, DataType.FLOAT32)});
            case STRIDED -> scope.backward(new NDArray[] {loss},
                    new NDArray[] {strided(Initializers.normal(1.0, 72).create(m, rows, DataType.FLOAT32), m)});
            case MEAN -> scope.backward(loss.mean());
            case MASKED_MEAN -> {
                // every fourth token masked out
                NDArray mask = m.arange(0, (int) rows.size(), 1, DataType.INT64).mod(4).neq(1).toType(DataType.FLOAT32, false);
                scope.backward(loss.reshape(-1).mul(mask).sum().div(mask.sum()));
            }
            default -> throw new IllegalArgumentException(upstream.toString());
        }
    }

    /**
     * One pass at one tensor-parallel rank with the reference kernel offered or not; checks that the
     * pass leaves no native array behind.
     */
    private static Pass pass(boolean kernel, boolean withGrad, Body body) {
        int forwards = ReferenceCrossEntropy.FORWARDS.get();
        int refusals = ReferenceCrossEntropy.REFUSALS.get();
        int backwards = ReferenceCrossEntropy.BACKWARDS.get();
        System.setProperty(ReferenceCrossEntropy.PROPERTY, Boolean.toString(kernel));
        Pass p;
        try {
            p = InJvmWorld.run(1, ctx -> {
                Communicator tp = ctx.groups(ParallelDims.of(1, 1, 1)).tp();
                NDManager root = ctx.manager();
                int live = NativeArrays.live(root);
                Pass result;
                try (AutogradScope scope = withGrad ? AutogradScope.open(root) : AutogradScope.openNoGrad(root)) {
                    NDManager m = scope.manager();
                    NDArray[] out = body.run(scope, tp, m);
                    NDArray loss = out[1];
                    assertEquals(DataType.FLOAT32, loss.getDataType(), "loss dtype");
                    if (withGrad) {
                        NDArray g = grad(out[0], m);
                        result = new Pass(loss.getShape(), loss.toFloatArray(), g.getDataType(), g.getShape(),
                                g.toType(DataType.FLOAT32, true).toFloatArray(), 0, 0, 0);
                    } else {
                        result = new Pass(loss.getShape(), loss.toFloatArray(), null, null, null, 0, 0, 0);
                    }
                }
                assertEquals(live, NativeArrays.live(root), "native arrays left after the pass");
                return result;
            }).get(0);
        } finally {
            System.clearProperty(ReferenceCrossEntropy.PROPERTY);
        }
        return new Pass(p.lossShape(), p.loss(), p.gradType(), p.gradShape(), p.grad(),
                ReferenceCrossEntropy.FORWARDS.get() - forwards, ReferenceCrossEntropy.REFUSALS.get() - refusals,
                ReferenceCrossEntropy.BACKWARDS.get() - backwards);
    }

    /** Same shapes and dtypes, losses and gradients within the tolerances (0: bitwise). */
    private static void assertAgree(Pass expected, Pass actual, double lossTolerance, double gradTolerance) {
        assertEquals(expected.lossShape(), actual.lossShape(), "loss shape");
        assertClose("per-token losses", expected.loss(), actual.loss(), lossTolerance);
        assertEquals(expected.gradType(), actual.gradType(), "gradient dtype");
        assertEquals(expected.gradShape(), actual.gradShape(), "gradient shape");
        if (expected.grad() != null) {
            assertClose("logits' gradient", expected.grad(), actual.grad(), gradTolerance);
        }
    }

    private static void assertClose(String what, float[] expected, float[] actual, double tolerance) {
        if (tolerance == 0) {
            assertArrayEquals(expected, actual, what + " bitwise");
            return;
        }
        assertEquals(expected.length, actual.length, what + " length");
        double max = 0;
        for (int i = 0; i < expected.length; i++) {
            assertTrue(Float.isFinite(expected[i]) && Float.isFinite(actual[i]), what + " finite at " + i);
            max = Math.max(max, Math.abs(expected[i] - actual[i]));
        }
        assertTrue(max <= tolerance, what + ": max |difference| " + max + " exceeds " + tolerance);
    }
}
