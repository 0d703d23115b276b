package io.mcore4j.tensorparallel;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.TensorMemory;
import io.mcore4j.core.autograd.Function;
import io.mcore4j.core.autograd.FunctionContext;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.PendingCollective;
import io.mcore4j.parallel.ReduceOp;

/**
 * The sequence-parallel column-parallel linear {@code y = gather(x)·Wᵀ + b} with its collectives
 * overlapped with its GEMMs (Megatron's {@code --tp-comm-overlap}, Transformer Engine's
 * all-gather + GEMM): the same math as {@link Mappings#gatherFromSequenceParallelRegion} (gradient
 * reduce-scattered) followed by a linear.
 *
 * <p>Forward: the all-gather of this rank's shard is started into a tensor of the full sequence
 * ({@link Communicator#startAllGatherInto}, on NCCL's second stream) and, while it travels, this rank's own block
 * of the output is computed from the shard it already has; then the other ranks' blocks from the gathered rows.
 * Each product is written into its rows of the output ({@link SequenceBlocks}): no copy puts it in place.
 *
 * <p>Backward, as Transformer Engine's bulk overlaps: the all-gather of the input (saved as the
 * local shard only, gathered again as Megatron-Core does, so the gathered input is not kept between
 * forward and backward) is started and overlaps the input-gradient GEMM {@code dY·W}; then the
 * reduce-scatter of that gradient is started and overlaps the weight-gradient GEMM
 * {@code dYᵀ·X} and the bias gradient, which are accumulated into the parameters' {@code .grad}
 * (so backward returns null for them, as {@link OverlappedColumnLinear} does).
 *
 * <p>Inputs: the shard {@code x [s/t, b, in]}, the weight shard {@code [out/t, in]} and, optionally,
 * the bias shard {@code [out/t]}. Output {@code [s, b, out/t]}. Every rank communicates in every
 * call, whatever needs a gradient, so the collectives stay matched.
 */
final class PipelinedGatherLinear implements Function {
    private final Communicator tp;
    private final boolean accumulationFusion;

    /**
     * @param tp the tensor-parallel group the sequence is split over
     * @param accumulationFusion whether the weight gradient may be added into {@code .grad} by its GEMM
     *     ({@link LinearWeightGradients})
     */
    PipelinedGatherLinear(Communicator tp, boolean accumulationFusion) {
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
            // a started collective reads its input after the call returns: no hidden copy may stand in for it
            NDArray x = TensorMemory.contiguous(inputs[0], temp);
            Shape shard = x.getShape();
            long m = shard.get(0);
            DataType dtype = DataTypes.of(x);
            NDArray gathered = DataTypes.empty(temp, new Shape(t * m).addAll(shard.slice(1)), dtype, x.getDevice());
            PendingCollective gathering = tp.startAllGatherInto(x, gathered);
            Shape outShape = new Shape(t * m).addAll(shard.slice(1, shard.dimension() - 1)).add(w.getShape().get(0));
            NDArray out = DataTypes.empty(owner, outShape, dtype, x.getDevice());
            NDArray wt = w.transpose();
            wt.attach(temp);
            SequenceBlocks.productInto(SequenceBlocks.rows(out, r * m, (r + 1) * m, temp), x, wt, b);
            gathering.await();
            for (long[] range : SequenceBlocks.others(m, t, r)) {
                SequenceBlocks.productInto(SequenceBlocks.rows(out, range[0], range[1], temp),
                        SequenceBlocks.rows(gathered, range[0], range[1], temp), wt, b);
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
        NDArray dy = grads[0];
        PendingCollective reduced;
        try (NDManager temp = owner.newSubManager()) {
            PendingCollective gathering = tp.startAllGather(TensorMemory.contiguous(x, temp), temp);
            NDArray dxFull = dy.matMul(w);
            dxFull.attach(temp);
            NDArray full = gathering.await();
            reduced = tp.startReduceScatter(dxFull, ReduceOp.SUM, owner);
            LinearWeightGradients.accumulate(ctx, w, b, dy, full, 1.0, accumulationFusion, temp);
            // the reduce-scatter reads dxFull: wait before the sub-manager closes it
            NDArray dx = reduced.await();
            NDArray[] result = new NDArray[ctx.inputCount()];
            result[0] = ctx.needsInputGrad(0) ? dx : null;
            return result;
        }
    }

    @Override
    public String name() {
        return "column-parallel-linear(sequence all-gather overlapped with the own block's GEMM)";
    }
}
