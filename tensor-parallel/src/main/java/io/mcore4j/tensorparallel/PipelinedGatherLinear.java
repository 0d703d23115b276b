package io.mcore4j.tensorparallel;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import io.mcore4j.core.TensorMemory;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.Function;
import io.mcore4j.core.autograd.FunctionContext;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.PendingCollective;
import io.mcore4j.parallel.ReduceOp;

import java.util.ArrayList;
import java.util.List;

/**
 * The sequence-parallel column-parallel linear {@code y = gather(x)·Wᵀ + b} with its collectives
 * overlapped with its GEMMs (Megatron's {@code --tp-comm-overlap}, Transformer Engine's
 * all-gather + GEMM): the same math as {@link Mappings#gatherFromSequenceParallelRegion} (gradient
 * reduce-scattered) followed by a linear.
 *
 * <p>Forward: this rank's shard is cut into {@code n} pieces ({@link SequenceChunks}); the
 * all-gathers of every piece are started at once ({@link Communicator#startAllGather}, in order on
 * NCCL's second stream) and the GEMM of piece {@code c} waits only for piece {@code c}, so it runs
 * while piece {@code c+1} travels. The per-piece products are put back in sequence order (one copy
 * of the output).
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

    /** @param tp the tensor-parallel group the sequence is split over */
    PipelinedGatherLinear(Communicator tp) {
        this.tp = tp;
    }

    @Override
    public NDArray[] forward(FunctionContext ctx, NDArray... inputs) {
        NDArray w = inputs[1];
        NDArray b = inputs.length > 2 ? inputs[2] : null;
        NDManager owner = ctx.manager();
        int n = SequenceChunks.pieces(inputs[0].getShape().get(0), tp.size());
        List<NDArray> products = new ArrayList<>(n);
        try (NDManager temp = owner.newSubManager()) {
            // a started collective reads its input after the call returns: no hidden copy may stand in for it
            NDArray x = TensorMemory.contiguous(inputs[0], temp);
            List<PendingCollective> gathers = new ArrayList<>(n);
            for (int c = 0; c < n; c++) {
                NDArray piece = SequenceChunks.piece(x, n, c);
                if (piece != x) {
                    piece.attach(temp);
                }
                gathers.add(tp.startAllGather(piece, temp));
            }
            for (int c = 0; c < n; c++) {
                NDArray gathered = gathers.get(c).await();
                products.add(Tensors.linear(gathered, w, b, n == 1 ? owner : temp));
            }
            NDArray out = SequenceChunks.interleave(products, tp.size(), owner);
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
            LinearWeightGradients.accumulate(ctx, w, b, dy, full, 1.0, temp);
            // the reduce-scatter reads dxFull: wait before the sub-manager closes it
            NDArray dx = reduced.await();
            NDArray[] result = new NDArray[ctx.inputCount()];
            result[0] = ctx.needsInputGrad(0) ? dx : null;
            return result;
        }
    }

    @Override
    public String name() {
        return "column-parallel-linear(sequence all-gather pipelined with the GEMM)";
    }
}
