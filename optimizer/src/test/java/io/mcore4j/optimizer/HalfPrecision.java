package io.mcore4j.optimizer;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;

/** Float16 and bfloat16 tensors for tests. */
final class HalfPrecision {
    private HalfPrecision() {}

    /** {@code values} as a float16 tensor of {@code shape}, owned by {@code m}. */
    static NDArray half(NDManager m, float[] values, long... shape) {
        return half(m, DataType.FLOAT16, values, shape);
    }

    /** {@code values} as a tensor of {@code dtype} (float16 or bfloat16) of {@code shape}, owned by {@code m}. */
    static NDArray half(NDManager m, DataType dtype, float[] values, long... shape) {
        NDArray f = m.create(values, new Shape(shape));
        NDArray h = DataTypes.toType(f, dtype, false);
        f.close();
        return h;
    }
}
