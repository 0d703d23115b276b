package io.mcore4j.tensorparallel;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.types.DataType;

/** Checks of the parallel layers' sizes, dtypes and inputs, with errors that name the bad value. */
final class LayerArguments {
    private LayerArguments() {}

    /** Refuses an activation whose last dim is not {@code expected}. */
    static void checkLastDim(NDArray x, long expected, String layer, String what) {
        int n = x.getShape().dimension();
        if (n == 0 || x.getShape().get(n - 1) != expected) {
            throw new IllegalArgumentException(layer + ": input of shape " + x.getShape() + " must have last dim "
                    + expected + " (" + what + ")");
        }
    }

    /** {@code size / parts}, refusing sizes that do not divide. */
    static int divide(int size, int parts, String what) {
        if (size < 1) {
            throw new IllegalArgumentException(what + " must be at least 1, got " + size);
        }
        if (size % parts != 0) {
            throw new IllegalArgumentException(what + " " + size + " is not divisible by tensor parallel size " + parts);
        }
        return size / parts;
    }

    /** Refuses dtypes a layer cannot hold as trainable parameters. */
    static DataType checkFloating(DataType dtype) {
        if (dtype != DataType.FLOAT32 && dtype != DataType.FLOAT16 && dtype != DataType.BFLOAT16 && dtype != DataType.FLOAT64) {
            throw new IllegalArgumentException("parameter dtype " + dtype + " is not supported; use float32, float16 or bfloat16");
        }
        return dtype;
    }
}
