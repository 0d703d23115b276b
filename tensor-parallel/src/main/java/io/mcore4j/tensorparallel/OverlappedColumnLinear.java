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
 * The column-parallel linear {@code y = x·Wᵀ + b} on an input copied to the tensor-parallel region, or, with
 * sequence parallelism, on the input's sequence chunks all-gathered over {@code tp} (dim 0), as one Function whose
 * backward overlaps the input gradient's collective with the weight gradient: it computes {@code dx = dy·W}, starts
 * the all-reduce of {@code dx} over {@code tp} ({@link Communicator#startAllReduceInPlace}), or its reduce-scatter
 * along the sequence ({@link Communicator#startReduceScatter}), on a second stream with NCCL, computes
 * {@code dW = dyᵀ·x} and {@code db = Σ dy} meanwhile and accumulates them into the parameters' {@code .grad}
 * ({@link LinearWeightGradients}), then waits for {@code dx}. This is the same math as
 * {@link Mappings#copyToTensorParallelRegion} (or {@link Mappings#gatherFromSequenceParallelRegion}) followed by a
 * linear, with the collective hidden behind the weight-gradient GEMM (Megatron-Core overlaps the same pair). With
 * sequence parallelism it keeps the gathered input for backward, as the composed form does.
 *
 * <p>Inputs: {@code x [.., in]} (with sequence parallelism this rank's chunk {@code [s/t, .., in]}), the weight shard
 * {@code [out/t, in]} and, optionally, the bias shard {@code [out/t]}. The weight and bias are inputs so that the
 * application is recorded when only they require grad; their gradients are accumulated here (one accumulation each,
 * like libtorch's), so backward returns null for them.
 */
final class OverlappedColumnLinear implements Function {
    private final Communicator tp;
    private final boolean sequenceParallel;
    private final boolean accumulationFusion;

    /**
     * @param tp the tensor-parallel group the input gradient is summed over
     * @param sequenceParallel whether the input is this rank's sequence chunk, gathered forward and its gradient
     *     reduce-scattered back
     * @param accumulationFusion whether the weight gradient may be added into {@code .grad} by its GEMM
     *     ({@link LinearWeightGradients})
     */
    OverlappedColumnLinear(Communicator tp, boolean sequenceParallel, boolean accumulationFusion) {
        this.tp = tp;
        this.sequenceParallel = sequenceParallel;
        this.accumulationFusion = accumulationFusion;
    }

    @Override
    public NDArray[] forward(FunctionContext ctx, NDArray... inputs) {
        NDArray[] saved = inputs.clone();
        if (sequenceParallel) {
            saved[0] = tp.allGather(inputs[0], 0, ctx.manager());
        }
        NDArray out = Tensors.linear(saved[0], saved[1], saved.length > 2 ? saved[2] : null, ctx.manager());
        ctx.saveForBackward(saved);
        return new NDArray[] {out};
    }

    @Override
    public NDArray[] backward(FunctionContext ctx, NDArray... grads) {
        NDArray x = ctx.saved(0);
        NDArray w = ctx.saved(1);
        NDArray b = ctx.inputCount() > 2 ? ctx.saved(2) : null;
        NDManager owner = ctx.manager();
        NDArray dy = grads[0];
        // every rank sums, whether or not its x needs a gradient, so the collective stays matched; a reduce-scatter's
        // input is dead once it is awaited (the stream then waits for the collective that read it), an all-reduce's
        // is its result
        NDArray dxSummed;
        try (NDManager full = owner.newSubManager()) {
            NDArray dx = dy.matMul(w);
            dx.attach(sequenceParallel ? full : owner);
            PendingCollective summed = sequenceParallel ? tp.startReduceScatter(dx, ReduceOp.SUM, owner)
                    : tp.startAllReduceInPlace(dx, ReduceOp.SUM);
            try (NDManager temp = owner.newSubManager()) {
                LinearWeightGradients.accumulate(ctx, w, b, dy, x, 1.0, accumulationFusion, temp);
            }
            dxSummed = summed.await();
        }
        NDArray[] result = new NDArray[ctx.inputCount()];
        result[0] = ctx.needsInputGrad(0) ? dxSummed : null;
        return result;
    }

    @Override
    public String name() {
        return sequenceParallel ? "column-parallel-linear(sequence gathered, overlapped input-gradient reduce-scatter)"
                : "column-parallel-linear(overlapped input-gradient all-reduce)";
    }
}
