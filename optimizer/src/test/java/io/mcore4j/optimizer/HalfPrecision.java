package io.mcore4j.optimizer;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;

/** Float16 tensors for tests. */
final class HalfPrecision {
    private HalfPrecision() {}

    /** {@code values} as a float16 tensor of {@code shape}, owned by {@code m}. */
    static NDArray half(NDManager m, float[] values, long... shape) {
        NDArray f = m.create(values, new Shape(shape));
        NDArray h = f.toType(DataType.FLOAT16, false);
        f.close();
        return h;
    }
}
