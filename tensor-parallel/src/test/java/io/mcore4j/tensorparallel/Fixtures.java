package io.mcore4j.tensorparallel;

import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.testing.NativeArrays;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ProcessGroup;
import io.mcore4j.parallel.ReduceOp;
import io.mcore4j.parallel.inprocess.InJvmWorld;

/** Small helpers shared by this module's tests. */
final class Fixtures {
    private Fixtures() {}

    /** A group of one holding only this rank (a TP=1 communicator inside a larger in-JVM world). */
    static Communicator solo(InJvmWorld.Rank ctx) {
        return ctx.backend().communicator(ProcessGroup.of("solo", new int[] {ctx.rank()}, ctx.rank()));
    }

    /** A leaf that requires grad, a copy of {@code source}, owned by {@code owner}. */
    static NDArray leaf(NDArray source, NDManager owner) {
        NDArray copy = source.duplicate();
        copy.attach(owner);
        copy.setRequiresGradient(true);
        return copy;
    }

    /** Chunk {@code index} of {@code parts} along {@code dim}, a contiguous copy owned by {@code owner}. */
    static NDArray chunk(NDArray full, int dim, int parts, int index, NDManager owner) {
        return new StridedPartition(dim, index, parts, 1).slice(full, owner);
    }

    /** The accumulated gradient of a leaf, failing if none was written. */
    static NDArray grad(NDArray leaf, NDManager owner) {
        NDArray g = Tensors.gradientOrNull(leaf, owner);
        assertTrue(g != null, "no gradient reached a leaf of shape " + leaf.getShape());
        return g;
    }

    /** Sums a tensor over the group (what the optimizer does for sequence-parallel parameters). */
    static NDArray sumOver(Communicator c, NDArray x, NDManager owner) {
        return c.size() == 1 ? x : c.allReduce(x, ReduceOp.SUM, owner);
    }

    /** Values {@code scale * (i % 7 - 3)} in row-major order: small, exact, different along every dim. */
    static NDArray pattern(NDManager m, Shape shape, float scale, DataType dtype) {
        float[] v = new float[(int) shape.size()];
        for (int i = 0; i < v.length; i++) {
            v[i] = scale * (i % 7 - 3);
        }
        return m.create(v, shape).toType(dtype, false);
    }

    /** Asserts agreement in float32; the message names what differed and by how much. */
    static void assertClose(String what, NDArray actual, NDArray expected, double tolerance) {
        NDArray a = actual.toType(DataType.FLOAT32, true);
        NDArray e = expected.toType(DataType.FLOAT32, true);
        try {
            NativeArrays.assertClose(what, a, e, tolerance);
        } finally {
            a.close();
            e.close();
        }
    }

    /** Asserts bitwise equality. */
    static void assertBitwiseEqual(String what, NDArray actual, NDArray expected) {
        if (!actual.getShape().equals(expected.getShape()) || actual.getDataType() != expected.getDataType()) {
            throw new AssertionError(what + ": " + actual.getDataType() + " " + actual.getShape() + " vs "
                    + expected.getDataType() + " " + expected.getShape());
        }
        byte[] a = actual.toByteArray();
        byte[] e = expected.toByteArray();
        if (!java.util.Arrays.equals(a, e)) {
            throw new AssertionError(what + ": contents differ bitwise");
        }
    }
}
