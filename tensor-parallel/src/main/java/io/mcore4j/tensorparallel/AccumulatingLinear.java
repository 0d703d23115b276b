package io.mcore4j.tensorparallel;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.Function;
import io.mcore4j.core.autograd.FunctionContext;

/**
 * A local linear {@code y = x·Wᵀ + b} as one Function whose backward adds the weight gradient into the weight's
 * {@code .grad} inside the GEMM ({@link LinearWeightGradients}, Megatron's gradient accumulation fusion), where
 * libtorch's autograd writes {@code dyᵀ·x} and adds it to the gradient in a second pass over the weight: with
 * micro-batches every weight gradient after a step's first costs that pass (the LLaMA-7B TP4 step: 2,645 such adds,
 * 21.7 of its 485 ms). The same math as {@link Tensors#linear} under autograd, to the GEMM's rounding.
 *
 * <p>Inputs: {@code x [.., in]}, the weight {@code [out, in]} and, optionally, the bias {@code [out]}. The weight and
 * bias are inputs so that the application is recorded when only they require grad; their gradients are accumulated
 * here, so backward returns null for them.
 */
final class AccumulatingLinear implements Function {

    @Override
    public NDArray[] forward(FunctionContext ctx, NDArray... inputs) {
        NDArray out = Tensors.linear(inputs[0], inputs[1], inputs.length > 2 ? inputs[2] : null, ctx.manager());
        ctx.saveForBackward(inputs);
        return new NDArray[] {out};
    }

    @Override
    public NDArray[] backward(FunctionContext ctx, NDArray... grads) {
        NDArray x = ctx.saved(0);
        NDArray w = ctx.saved(1);
        NDArray b = ctx.inputCount() > 2 ? ctx.saved(2) : null;
        NDManager owner = ctx.manager();
        NDArray dy = grads[0];
        NDArray[] result = new NDArray[ctx.inputCount()];
        if (ctx.needsInputGrad(0)) {
            result[0] = dy.matMul(w);
            result[0].attach(owner);
        }
        try (NDManager temp = owner.newSubManager()) {
            LinearWeightGradients.accumulate(ctx, w, b, dy, x, 1.0, true, temp);
        }
        return result;
    }

    @Override
    public String name() {
        return "linear(weight gradient accumulated in its GEMM)";
    }
}
