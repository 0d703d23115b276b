package io.mcore4j.tensorparallel;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.TensorMemory;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.Function;
import io.mcore4j.core.autograd.FunctionContext;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.PendingCollective;

import java.util.Arrays;

/**
 * The sequence-parallel row-parallel linear {@code y = reduceScatter(x·Wᵀ + b/t)} with its
 * collectives overlapped with its GEMMs (Megatron's {@code --tp-comm-overlap}, Transformer Engine's
 * GEMM + reduce-scatter): the same math as {@link RowParallelLinear}'s composed path (the partial
 * product and the bias share, then {@link Mappings#reduceScatterToSequenceParallelRegion}).
 *
 * <p>Forward: the partial products of the other ranks' blocks of the sequence are computed first (with the
 * bias share {@code b/t} in the GEMM's epilogue) and sent to their ranks ({@link Communicator#startAllToAll}, on
 * NCCL's second stream); while they travel, this rank's own block is computed, and the partial products the
 * other ranks sent for it are added to it: a reduce-scatter whose communication hides behind the last GEMM.
 *
 * <p>Backward: the all-gather of the output gradient is started into a tensor of the full sequence
 * ({@link Communicator#startAllGatherInto}) and, while it travels, the input gradient of this rank's own block
 * is computed from the gradient it already has; then the other blocks' from the gathered rows. The gathered
 * gradient then gives the weight gradient {@code dYᵀ·x} and the bias gradient {@code Σ dY / t} (as the composed
 * path's share), accumulated into the parameters' {@code .grad} (backward returns null for them). Products are
 * written into their rows ({@link SequenceBlocks}): no copy puts them in place.
 *
 * <p>Inputs: {@code x [s, b, in/t]}, the weight shard {@code [out, in/t]} and, optionally, the whole
 * bias {@code [out]}. Output {@code [s/t, b, out]}. Every rank communicates in every call.
 */
final class PipelinedLinearReduceScatter implements Function {
    private final Communicator tp;
    private final boolean accumulationFusion;

    /**
     * @param tp the tensor-parallel group the sequence is split over
     * @param accumulationFusion whether the weight gradient may be added into {@code .grad} by its GEMM
     *     ({@link LinearWeightGradients})
     */
    PipelinedLinearReduceScatter(Communicator tp, boolean accumulationFusion) {
        this.tp = tp;
        this.accumulationFusion = accumulationFusion;
    }

    @Override
    public NDArray[] forward(FunctionContext ctx, NDArray... inputs) {
        NDArray w = inputs[1];
        NDArray b = inputs.length > 2 ? inputs[2] : null;
        NDManager owner = ctx.manager();
        int t = tp.size();
        int r = tp.rank();
        try (NDManager temp = owner.newSubManager()) {
            NDArray x = TensorMemory.contiguous(inputs[0], temp);
            Shape full = x.getShape();
            long m = full.get(0) / t;
            DataType dtype = DataTypes.of(x);
            Shape block = new Shape(m).addAll(full.slice(1, full.dimension() - 1)).add(w.getShape().get(0));
            NDArray share = b == null ? null : Tensors.scale(b, 1.0 / t, temp);
            NDArray wt = w.transpose();
            wt.attach(temp);
            // the other blocks' partial products, in rank order, then sent to their ranks
            NDArray others = DataTypes.empty(temp, new Shape((t - 1) * m).addAll(block.slice(1)), dtype, x.getDevice());
            long at = 0;
            for (long[] range : SequenceBlocks.others(m, t, r)) {
                long rows = range[1] - range[0];
                SequenceBlocks.productInto(SequenceBlocks.rows(others, at, at + rows, temp),
                        SequenceBlocks.rows(x, range[0], range[1], temp), wt, share);
                at += rows;
            }
            long[] splits = new long[t];
            Arrays.fill(splits, m);
            splits[r] = 0;
            PendingCollective exchange = tp.startAllToAll(others, splits, splits, temp);
            NDArray out = DataTypes.empty(owner, block, dtype, x.getDevice());
            SequenceBlocks.productInto(out, SequenceBlocks.rows(x, r * m, (r + 1) * m, temp), wt, share);
            NDArray received = exchange.await();
            if (t == 2) {
                out.addi(received);
            } else {
                NDArray perRank = received.reshape(new Shape(t - 1).addAll(block));
                perRank.attach(temp);
                NDArray sum = perRank.sum(new int[] {0});
                sum.attach(temp);
                out.addi(sum);
            }
            ctx.saveForBackward(inputs);
            return new NDArray[] {out};
        }
    }

    @Override
    public NDArray[] backward(FunctionContext ctx, NDArray... grads) {
        NDArray x = ctx.saved(0);
        NDArray w = ctx.saved(1);
        NDArray b = ctx.inputCount() > 2 ? ctx.saved(2) : null;
        NDManager owner = ctx.manager();
        int t = tp.size();
        int r = tp.rank();
        try (NDManager temp = owner.newSubManager()) {
            NDArray dy = TensorMemory.contiguous(grads[0], temp);
            long m = dy.getShape().get(0);
            NDArray dyFull = DataTypes.empty(temp, new Shape(t * m).addAll(dy.getShape().slice(1)), DataTypes.of(dy),
                    dy.getDevice());
            PendingCollective gathering = tp.startAllGatherInto(dy, dyFull);
            NDArray dx = null;
            if (ctx.needsInputGrad(0)) {
                dx = DataTypes.empty(owner, x.getShape(), DataTypes.of(x), x.getDevice());
                SequenceBlocks.productInto(SequenceBlocks.rows(dx, r * m, (r + 1) * m, temp), dy, w, null);
            }
            gathering.await();
            if (dx != null) {
                for (long[] range : SequenceBlocks.others(m, t, r)) {
                    SequenceBlocks.productInto(SequenceBlocks.rows(dx, range[0], range[1], temp),
                            SequenceBlocks.rows(dyFull, range[0], range[1], temp), w, null);
                }
            }
            if (ctx.needsInputGrad(1) || (b != null && ctx.needsInputGrad(2))) {
                LinearWeightGradients.accumulate(ctx, w, b, dyFull, x, 1.0 / t, accumulationFusion, temp);
            }
            NDArray[] result = new NDArray[ctx.inputCount()];
            result[0] = dx;
            return result;
        }
    }

    @Override
    public String name() {
        return "row-parallel-linear(sequence reduce-scatter overlapped with the own block's GEMM)";
    }
}
