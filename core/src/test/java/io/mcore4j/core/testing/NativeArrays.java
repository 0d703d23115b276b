package io.mcore4j.core.testing;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;

/** Test helpers shared by every module's tests (published in the core test-jar). */
public final class NativeArrays {
    private NativeArrays() {}

    /**
     * Number of live native arrays owned by {@code root} and its sub-managers.
     *
     * @param root a manager
     * @return the count
     */
    public static int live(NDManager root) {
        return root.getManagedArrays().size();
    }

    /**
     * Largest absolute elementwise difference, computed in float64.
     *
     * @param a a tensor
     * @param b a tensor of the same shape
     * @return max |a - b|
     */
    public static double maxAbsDiff(NDArray a, NDArray b) {
        if (!a.getShape().equals(b.getShape())) {
            throw new AssertionError("shapes differ: " + a.getShape() + " vs " + b.getShape());
        }
        try (NDManager temp = a.getManager().newSubManager()) {
            NDArray x = a.toType(DataType.FLOAT64, true);
            NDArray y = b.toType(DataType.FLOAT64, true);
            x.attach(temp);
            y.attach(temp);
            NDArray d = x.sub(y).abs().max();
            d.attach(temp);
            return d.getDouble();
        }
    }

    /**
     * Largest absolute difference relative to the largest magnitude of {@code expected} (or 1).
     *
     * @param actual a tensor
     * @param expected the reference of the same shape
     * @return max |a - e| / max(1, max |e|)
     */
    public static double maxRelDiff(NDArray actual, NDArray expected) {
        double scale;
        try (NDManager temp = expected.getManager().newSubManager()) {
            NDArray e = expected.toType(DataType.FLOAT64, true);
            e.attach(temp);
            NDArray m = e.abs().max();
            m.attach(temp);
            scale = Math.max(1.0, m.getDouble());
        }
        return maxAbsDiff(actual, expected) / scale;
    }

    /**
     * Fails unless the two tensors agree within {@code tolerance} (absolute).
     *
     * @param what description for the message
     * @param actual the value under test
     * @param expected the reference
     * @param tolerance maximum absolute difference
     */
    public static void assertClose(String what, NDArray actual, NDArray expected, double tolerance) {
        double d = maxAbsDiff(actual, expected);
        if (!(d <= tolerance)) {
            throw new AssertionError(what + ": max |difference| " + d + " exceeds " + tolerance);
        }
    }
}
