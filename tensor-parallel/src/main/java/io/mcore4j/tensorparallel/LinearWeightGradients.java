package io.mcore4j.tensorparallel;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.WeightGradients;
import io.mcore4j.core.autograd.FunctionContext;

/**
 * The weight and bias gradients of a linear {@code y = x·Wᵀ + b} that a Function of this package computes
 * itself, added into the parameters' {@code .grad} (one accumulation each, like libtorch's): {@code dW = dyᵀ·x}
 * and {@code db = scale · Σ dy}, each only where the Function's input (1: the weight, 2: the bias) needs it. The
 * weight's is summed onto an existing gradient by the GEMM itself ({@link WeightGradients#accumulate}) where the
 * layer allows it and {@link LocalLinear} fuses the accumulation.
 */
final class LinearWeightGradients {
    private LinearWeightGradients() {}

    /**
     * @param ctx the Function's context: inputs 1 and 2 are the weight and the bias
     * @param w the weight shard {@code [out, in]}
     * @param b the bias shard {@code [out]}, or null
     * @param dy the output gradient, any leading dims, last dim {@code out}
     * @param x the input, the same leading dims, last dim {@code in}
     * @param biasScale the bias gradient's factor (1, or 1/t for a row-parallel bias added as b/t on each rank)
     * @param fusion whether the layer lets its weight gradient be added by the GEMM (where {@link LocalLinear} fuses
     *     the accumulation on the weight's device)
     * @param temp owner of the temporaries
     */
    static void accumulate(FunctionContext ctx, NDArray w, NDArray b, NDArray dy, NDArray x, double biasScale,
                           boolean fusion, NDManager temp) {
        boolean weight = ctx.needsInputGrad(1);
        boolean bias = b != null && ctx.needsInputGrad(2);
        if (!weight && !bias) {
            return;
        }
        long out = dy.getShape().get(dy.getShape().dimension() - 1);
        NDArray dy2 = dy.reshape(-1, out);
        dy2.attach(temp);
        if (weight) {
            NDArray x2 = x.reshape(-1, x.getShape().get(x.getShape().dimension() - 1));
            x2.attach(temp);
            WeightGradients.accumulate(w, dy2, x2, fusion && LocalLinear.fusesAccumulation(w), temp);
        }
        if (bias) {
            NDArray db = dy2.sum(new int[] {0});
            db.attach(temp);
            Tensors.accumulateGradient(b, biasScale == 1.0 ? db : Tensors.scale(db, biasScale, temp));
        }
    }
}
