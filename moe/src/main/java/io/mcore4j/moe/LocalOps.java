package io.mcore4j.moe;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.index.NDIndex;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import ai.djl.pytorch.engine.PtNDArray;
import ai.djl.pytorch.jni.JniUtils;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.autograd.Function;
import io.mcore4j.core.autograd.FunctionContext;

/**
 * Communication-free tensor operations of the MoE layer. DJL attaches an op's result to its first
 * operand's manager, which may be long-lived (a parameter, the caller's input); these methods move
 * what they create into the given owner, normally the pass's scope manager.
 */
final class LocalOps {
    private LocalOps() {}

    /**
     * {@code x · factor}, differentiable. DJL's {@code mul(Number)} wraps the number in a tensor
     * backed by a Java buffer and closes it at once, while autograd keeps that tensor for backward;
     * once the buffer is collected, the backward multiplies by garbage. The factor here is a
     * libtorch-allocated scalar, owned by {@code owner}.
     */
    static NDArray scale(NDArray x, double factor, NDManager owner) {
        NDArray scalar = owner.full(new Shape(), (float) factor, x.getDataType());
        return own(x.mul(scalar), owner);
    }

    /** Moves {@code array} into {@code owner} and returns it. */
    static NDArray own(NDArray array, NDManager owner) {
        array.attach(owner);
        return array;
    }

    /** {@code x · wᵀ + b} ({@code b} may be null), owned by {@code owner}. */
    static NDArray linear(NDArray x, NDArray w, NDArray b, NDManager owner) {
        return own(JniUtils.linear((PtNDArray) x, (PtNDArray) w, (PtNDArray) b), owner);
    }

    /** Rows {@code rows} (int64 indices) of {@code x}, differentiable (index-select), owned by {@code owner}. */
    static NDArray rows(NDArray x, NDArray rows, NDManager owner) {
        return own(x.get(new NDIndex("{}", rows)), owner);
    }

    /**
     * {@code x} cast to {@code dtype}, differentiably ({@code x} itself when it already has it).
     * DJL's {@code toType} detaches its result from the autograd graph, so the cast is a
     * {@link Function} whose backward casts the gradient back.
     */
    static NDArray cast(AutogradScope scope, NDArray x, DataType dtype) {
        if (x.getDataType() == dtype) {
            return x;
        }
        return scope.apply1(new Cast(dtype), x);
    }

    /** Forward casts to {@code dtype}; backward casts the gradient to the input's dtype. */
    private record Cast(DataType dtype) implements Function {
        @Override
        public NDArray[] forward(FunctionContext ctx, NDArray... inputs) {
            ctx.setState(inputs[0].getDataType());
            return new NDArray[] {own(inputs[0].toType(dtype, false), ctx.manager())};
        }

        @Override
        public NDArray[] backward(FunctionContext ctx, NDArray... grads) {
            return new NDArray[] {own(grads[0].toType(ctx.state(DataType.class), false), ctx.manager())};
        }

        @Override
        public String name() {
            return "cast-to-" + dtype;
        }
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
