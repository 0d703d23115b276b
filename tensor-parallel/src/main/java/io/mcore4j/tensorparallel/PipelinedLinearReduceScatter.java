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
 * The sequence-parallel row-parallel linear {@code y = reduceScatter(x·Wᵀ + b/t)} with its
 * collectives overlapped with its GEMMs (Megatron's {@code --tp-comm-overlap}, Transformer Engine's
 * GEMM + reduce-scatter): the same math as {@link RowParallelLinear}'s composed path (the partial
 * product and the bias share, then {@link Mappings#reduceScatterToSequenceParallelRegion}).
 *
 * <p>Forward: the sequence is cut into {@code n} pieces per rank ({@link SequenceChunks}); for piece
 * {@code c} the rows every rank's shard needs from it are multiplied (with the bias share
 * {@code b/t} in the GEMM's epilogue) and their reduce-scatter is started
 * ({@link Communicator#startReduceScatter}) before the next piece's GEMM is queued, so each
 * reduction travels while the next piece is computed. This rank's reduced pieces are concatenated
 * into its shard.
 *
 * <p>Backward: the all-gathers of the output gradient's pieces are started at once; the
 * input-gradient GEMM of piece {@code c} waits only for piece {@code c}. The gathered gradient, put
 * back in sequence order, then gives the weight gradient {@code dYᵀ·x} and the bias gradient
 * {@code Σ dY / t} (as the composed path's share), accumulated into the parameters' {@code .grad}
 * (backward returns null for them).
 *
 * <p>Inputs: {@code x [s, b, in/t]}, the weight shard {@code [out, in/t]} and, optionally, the whole
 * bias {@code [out]}. Output {@code [s/t, b, out]}. Every rank communicates in every call.
 */
final class PipelinedLinearReduceScatter implements Function {
    private final Communicator tp;

    /** @param tp the tensor-parallel group the sequence is split over */
    PipelinedLinearReduceScatter(Communicator tp) {
        this.tp = tp;
    }

    @Override
    public NDArray[] forward(FunctionContext ctx, NDArray... inputs) {
        NDArray x = inputs[0];
        NDArray w = inputs[1];
        NDArray b = inputs.length > 2 ? inputs[2] : null;
        NDManager owner = ctx.manager();
        int t = tp.size();
        int n = SequenceChunks.pieces(x.getShape().get(0) / t, t);
        try (NDManager temp = owner.newSubManager()) {
            NDArray share = b == null ? null : Tensors.scale(b, 1.0 / t, temp);
            List<PendingCollective> reductions = new ArrayList<>(n);
            for (int c = 0; c < n; c++) {
                NDArray rows = SequenceChunks.rows(x, t, n, c, temp);
                NDArray partial = Tensors.linear(rows, w, share, temp);
                reductions.add(tp.startReduceScatter(TensorMemory.contiguous(partial, temp), ReduceOp.SUM,
                        n == 1 ? owner : temp));
            }
            List<NDArray> reduced = new ArrayList<>(n);
            for (PendingCollective r : reductions) {
                reduced.add(r.await());
            }
            NDArray out = SequenceChunks.concat(reduced, owner);
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
        try (NDManager temp = owner.newSubManager()) {
            NDArray dy = TensorMemory.contiguous(grads[0], temp);
            int n = SequenceChunks.pieces(dy.getShape().get(0), t);
            List<PendingCollective> gathers = new ArrayList<>(n);
            for (int c = 0; c < n; c++) {
                NDArray piece = SequenceChunks.piece(dy, n, c);
                if (piece != dy) {
                    piece.attach(temp);
                }
                gathers.add(tp.startAllGather(piece, temp));
            }
            List<NDArray> gathered = new ArrayList<>(n);
            List<NDArray> inputGrads = new ArrayList<>(n);
            for (int c = 0; c < n; c++) {
                NDArray g = gathers.get(c).await();
                gathered.add(g);
                NDArray dx = g.matMul(w);
                dx.attach(n == 1 ? owner : temp);
                inputGrads.add(dx);
            }
            NDArray dx = SequenceChunks.interleave(inputGrads, t, owner);
            if (ctx.needsInputGrad(1) || (b != null && ctx.needsInputGrad(2))) {
                NDArray dyFull = SequenceChunks.interleave(gathered, t, temp);
                LinearWeightGradients.accumulate(ctx, w, b, dyFull, x, 1.0 / t, temp);
            }
            NDArray[] result = new NDArray[ctx.inputCount()];
            result[0] = ctx.needsInputGrad(0) ? dx : null;
            return result;
        }
    }

    @Override
    public String name() {
        return "row-parallel-linear(GEMM pipelined with the sequence reduce-scatter)";
    }
}
