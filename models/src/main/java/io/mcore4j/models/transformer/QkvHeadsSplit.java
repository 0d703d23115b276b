package io.mcore4j.models.transformer;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDArrays;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import io.mcore4j.core.TensorMemory;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.Function;
import io.mcore4j.core.autograd.FunctionContext;
import io.mcore4j.core.kernel.QkvGradientKernel;

/**
 * Splits the fused QKV projection's output {@code [s, b, groups * (perGroup + 2) * d]} into query
 * {@code [s, b, groups * perGroup, d]}, key and value {@code [s, b, groups, d]} (views, no copy). Its
 * backward interleaves the three gradients into one new tensor of the projection's layout: with a
 * {@link QkvGradientKernel} in one pass, else by concatenating them (libtorch's strided copies, what
 * autograd does for a split); both give the same values bit for bit. Fused attention's backward
 * gives the gradients contiguous in this layout, so they reach this backward without a copy. Once
 * packed, the three gradients (the {@code .grad} of this Function's output leaves) are emptied by the
 * scope, as every recorded function's are ({@link io.mcore4j.core.autograd.AutogradScope}).
 */
final class QkvHeadsSplit implements Function {
    private final int perGroup;
    private final int headDim;
    private final QkvGradientKernel kernel;

    /**
     * @param perGroup query heads per group
     * @param headDim elements per head
     * @param kernel the device's packing kernel, or null to compose the backward
     */
    QkvHeadsSplit(int perGroup, int headDim, QkvGradientKernel kernel) {
        this.perGroup = perGroup;
        this.headDim = headDim;
        this.kernel = kernel;
    }

    @Override
    public NDArray[] forward(FunctionContext ctx, NDArray... inputs) {
        NDArray mixed = inputs[0];
        long s = mixed.getShape().get(0);
        long b = mixed.getShape().get(1);
        long groups = mixed.getShape().get(2) / ((perGroup + 2L) * headDim);
        NDManager m = ctx.manager();
        NDArray grouped = Tensors.own(mixed.reshape(s, b, groups, perGroup + 2, headDim), m);
        NDList parts = Tensors.split(grouped, new long[] {perGroup, 1, 1}, 3);
        parts.attach(m);
        NDArray query = parts.get(0).reshape(s, b, groups * perGroup, headDim);
        NDArray key = parts.get(1).reshape(s, b, groups, headDim);
        NDArray value = parts.get(2).reshape(s, b, groups, headDim);
        return new NDArray[] {Tensors.own(query, m), Tensors.own(key, m), Tensors.own(value, m)};
    }

    @Override
    public NDArray[] backward(FunctionContext ctx, NDArray... gradOutputs) {
        NDManager m = ctx.manager();
        NDArray dq = gradOutputs[0];
        NDArray dk = gradOutputs[1];
        NDArray dv = gradOutputs[2];
        NDArray packed = kernel == null ? null : kernel.pack(TensorMemory.contiguous(dq, m),
                TensorMemory.contiguous(dk, m), TensorMemory.contiguous(dv, m), m);
        if (packed == null) {
            packed = concatenate(dq, dk, dv, m);
        }
        return new NDArray[] {packed};
    }

    /** The composed backward: libtorch's concatenation of the three gradients. */
    private NDArray concatenate(NDArray dq, NDArray dk, NDArray dv, NDManager m) {
        long s = dq.getShape().get(0);
        long b = dq.getShape().get(1);
        long groups = dk.getShape().get(2);
        NDList parts = new NDList(Tensors.own(dq.reshape(s, b, groups, perGroup, headDim), m),
                Tensors.own(dk.reshape(s, b, groups, 1, headDim), m), Tensors.own(dv.reshape(s, b, groups, 1, headDim), m));
        NDArray joined = Tensors.own(NDArrays.concat(parts, 3), m);
        return Tensors.own(joined.reshape(s, b, groups * (perGroup + 2L) * headDim), m);
    }

    @Override
    public String name() {
        return "qkv-heads-split";
    }
}
