package io.mcore4j.core;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import io.mcore4j.core.TorchScriptModule.Arg;

/**
 * A linear layer's weight gradient {@code dyᵀ·x} added into the weight's {@code .grad} by the GEMM itself (libtorch's
 * {@code addmm_}: the product is summed onto the old gradient as it is written; Megatron's gradient accumulation
 * fusion), where libtorch's autograd writes the product and then adds it in a second pass over the weight's size:
 * from the second micro-batch of a step on, every weight gradient costs one pass less. The sum is the same to the
 * GEMM's rounding (one rounding to the gradient's dtype instead of two).
 */
public final class WeightGradients {
    /** {@code forward(grad, dy, x) -> grad.addmm_(dy.t(), x)} ({@code scripts/make_accumulate_weight_gradient_module.py}). */
    static final String RESOURCE = "/io/mcore4j/core/torchscript/accumulate_weight_gradient.pt";

    private WeightGradients() {}

    /**
     * Adds {@code dyᵀ·x} into {@code grad} in place, in one GEMM that reads the old values.
     *
     * @param grad the gradient {@code [out, in]}, written in place
     * @param dy the output gradient {@code [rows, out]}, {@code grad}'s dtype
     * @param x the input {@code [rows, in]}, {@code grad}'s dtype
     */
    public static void addInto(NDArray grad, NDArray dy, NDArray x) {
        TorchScriptModules.shared(WeightGradients.class, RESOURCE).call(Arg.tensor(grad), Arg.tensor(dy), Arg.tensor(x));
    }

    /**
     * Accumulates {@code dyᵀ·x} into {@code weight}'s gradient: by {@link #addInto} where {@code inGemm} and the weight
     * has a gradient of {@code dy}'s dtype, else as libtorch accumulates (the product becomes the gradient, or is added
     * to it in a second pass).
     *
     * @param weight a leaf {@code [out, in]} that requires grad
     * @param dy the output gradient {@code [rows, out]}
     * @param x the input {@code [rows, in]}, {@code dy}'s dtype
     * @param inGemm whether the caller's choice is the GEMM's accumulation
     * @param temp owner of the temporaries
     */
    public static void accumulate(NDArray weight, NDArray dy, NDArray x, boolean inGemm, NDManager temp) {
        NDArray grad = inGemm ? Tensors.gradientOrNull(weight, temp) : null;
        if (grad != null && DataTypes.of(grad) == DataTypes.of(dy)) {
            addInto(grad, dy, x);
            return;
        }
        NDArray dw = dy.transpose().matMul(x);
        dw.attach(temp);
        Tensors.accumulateGradient(weight, dw);
    }
}
