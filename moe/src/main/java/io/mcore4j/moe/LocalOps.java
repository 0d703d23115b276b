package io.mcore4j.moe;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.index.NDIndex;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.Tensors;

/**
 * Communication-free tensor operations of the MoE layer. DJL attaches an op's result to its first
 * operand's manager, which may be long-lived (a parameter, the caller's input); these methods move
 * what they create into the given owner, normally the pass's scope manager.
 */
final class LocalOps {
    private LocalOps() {}

    /** Moves {@code array} into {@code owner} and returns it. */
    static NDArray own(NDArray array, NDManager owner) {
        array.attach(owner);
        return array;
    }

    /** {@code x · wᵀ + b} ({@code b} may be null), owned by {@code owner}. */
    static NDArray linear(NDArray x, NDArray w, NDArray b, NDManager owner) {
        return Tensors.linear(x, w, b, owner);
    }

    /** Rows {@code rows} (int64 indices) of {@code x}, differentiable (index-select), owned by {@code owner}. */
    static NDArray rows(NDArray x, NDArray rows, NDManager owner) {
        return own(x.get(new NDIndex("{}", rows)), owner);
    }

    /** {@code log Σ exp(x)} over the last dim, stabilised by the (constant) row maximum. */
    static NDArray logSumExp(NDArray x, NDManager owner) {
        int last = x.getShape().dimension() - 1;
        NDArray max = own(x.max(new int[] {last}, true).stopGradient(), owner);
        return own(x.sub(max).exp().sum(new int[] {last}).log().add(max.squeeze(last)), owner);
    }

    /** A host copy of an integer or floating tensor's values as longs (rounded). */
    static long[] toLongs(NDArray x) {
        if (x.getDataType() == DataType.INT64) {
            return x.toLongArray();
        }
        try (NDManager temp = x.getManager().newSubManager()) {
            NDArray asLong = own(x.round().toType(DataType.INT64, false), temp);
            return asLong.toLongArray();
        }
    }

    /** Sum of {@code values[from, to)}. */
    static long sum(long[] values, int from, int to) {
        long s = 0;
        for (int i = from; i < to; i++) {
            s += values[i];
        }
        return s;
    }
}
