package io.mcore4j.tensorparallel;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;

/**
 * The local (communication-free) math of the parallel layers, recorded by libtorch autograd. DJL
 * attaches an op's result to its first operand's manager, which may be a caller's long-lived
 * manager; these methods move every result they create into the scope's manager instead.
 */
final class LocalOps {
    private LocalOps() {}

    /** {@code x · wᵀ + b} ({@code b} may be null, else added inside the GEMM, see {@link Tensors#linear}), owned by the scope. */
    static NDArray linear(AutogradScope scope, NDArray x, NDArray w, NDArray b) {
        return Tensors.linear(x, w, b, scope.manager());
    }

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
