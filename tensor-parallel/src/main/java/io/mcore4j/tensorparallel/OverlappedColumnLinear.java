package io.mcore4j.tensorparallel;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.Function;
import io.mcore4j.core.autograd.FunctionContext;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.PendingCollective;
import io.mcore4j.parallel.ReduceOp;

/**
 * The column-parallel linear {@code y = x·Wᵀ + b} on an input copied to the tensor-parallel region,
 * as one Function whose backward overlaps the all-reduce of the input gradient with the weight
 * gradient: it computes {@code dx = dy·W}, starts the all-reduce of {@code dx} over {@code tp}
 * ({@link Communicator#startAllReduceInPlace}, on a second stream with NCCL), computes
 * {@code dW = dyᵀ·x} and {@code db = Σ dy} meanwhile and accumulates them into the parameters'
 * {@code .grad}, then waits for {@code dx}. This is the same math as
 * {@link Mappings#copyToTensorParallelRegion} followed by a linear, with the all-reduce hidden behind
 * the weight-gradient GEMM (Megatron-Core overlaps the same pair).
 *
 * <p>Inputs: {@code x [.., in]}, the weight shard {@code [out/t, in]} and, optionally, the bias
 * shard {@code [out/t]}. The weight and bias are inputs so that the application is recorded when
 * only they require grad; their gradients are accumulated here (one accumulation each, like
 * libtorch's), so backward returns null for them.
 */
final class OverlappedColumnLinear implements Function {
    private final Communicator tp;

    /** @param tp the tensor-parallel group the input gradient is all-reduced over */
    OverlappedColumnLinear(Communicator tp) {
        this.tp = tp;
    }

    @Override
    public NDArray[] forward(FunctionContext ctx, NDArray... inputs) {
        NDArray x = inputs[0];
        NDArray w = inputs[1];
        NDArray b = inputs.length > 2 ? inputs[2] : null;
        NDArray out = Tensors.linear(x, w, b, ctx.manager());
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
        // every rank all-reduces, whether or not its x needs a gradient, so the collective stays matched
        NDArray dx = dy.matMul(w);
        dx.attach(owner);
        PendingCollective reduced = tp.startAllReduceInPlace(dx, ReduceOp.SUM);
        try (NDManager temp = owner.newSubManager()) {
            LinearWeightGradients.accumulate(ctx, w, b, dy, x, 1.0, temp);
        }
        NDArray dxReduced = reduced.await();
        NDArray[] result = new NDArray[ctx.inputCount()];
        result[0] = ctx.needsInputGrad(0) ? dxReduced : null;
        return result;
    }

    @Override
    public String name() {
        return "column-parallel-linear(overlapped input-gradient all-reduce)";
    }
}
