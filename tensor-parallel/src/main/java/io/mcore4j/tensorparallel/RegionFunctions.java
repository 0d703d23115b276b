package io.mcore4j.tensorparallel;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDArrays;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.Function;
import io.mcore4j.core.autograd.FunctionContext;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ReduceOp;

import java.util.Arrays;

/**
 * The autograd Functions behind {@link Mappings}: each pairs a collective in forward with its
 * transpose in backward. Every result is owned by the application's context manager. Instances
 * hold only their communicator and are created per application.
 */
final class RegionFunctions {
    private RegionFunctions() {}

    /** Identity forward, all-reduce (sum) backward. */
    record CopyToRegion(Communicator tp) implements Function {
        @Override
        public NDArray[] forward(FunctionContext ctx, NDArray... inputs) {
            return new NDArray[] {inputs[0]};
        }

        @Override
        public NDArray[] backward(FunctionContext ctx, NDArray... grads) {
            return new NDArray[] {tp.allReduce(grads[0], ReduceOp.SUM, ctx.manager())};
        }

        @Override
        public String name() {
            return "copy-to-tensor-parallel-region";
        }
    }

    /** All-reduce (sum) forward, identity backward. */
    record ReduceFromRegion(Communicator tp) implements Function {
        @Override
        public NDArray[] forward(FunctionContext ctx, NDArray... inputs) {
            return new NDArray[] {tp.allReduce(inputs[0], ReduceOp.SUM, ctx.manager())};
        }

        @Override
        public NDArray[] backward(FunctionContext ctx, NDArray... grads) {
            return new NDArray[] {grads[0]};
        }

        @Override
        public String name() {
            return "reduce-from-tensor-parallel-region";
        }
    }

    /** Own chunk of {@code dim} forward, all-gather along {@code dim} backward. */
    record Split(Communicator tp, int dim, String name) implements Function {
        @Override
        public NDArray[] forward(FunctionContext ctx, NDArray... inputs) {
            return new NDArray[] {ownChunk(tp, inputs[0], dim, ctx.manager())};
        }

        @Override
        public NDArray[] backward(FunctionContext ctx, NDArray... grads) {
            return new NDArray[] {tp.allGather(grads[0], dim, ctx.manager())};
        }
    }

    /** All-gather along {@code dim} forward; backward reduce-scatters or keeps the own chunk. */
    record Gather(Communicator tp, int dim, boolean reduceScatterGrad, String name) implements Function {
        @Override
        public NDArray[] forward(FunctionContext ctx, NDArray... inputs) {
            return new NDArray[] {tp.allGather(inputs[0], dim, ctx.manager())};
        }

        @Override
        public NDArray[] backward(FunctionContext ctx, NDArray... grads) {
            NDArray g = reduceScatterGrad
                    ? tp.reduceScatter(grads[0], dim, ReduceOp.SUM, ctx.manager())
                    : ownChunk(tp, grads[0], dim, ctx.manager());
            return new NDArray[] {g};
        }
    }

    /** Reduce-scatter (sum) along dim 0 forward, all-gather along dim 0 backward. */
    record ReduceScatterFirstDim(Communicator tp) implements Function {
        @Override
        public NDArray[] forward(FunctionContext ctx, NDArray... inputs) {
            return new NDArray[] {tp.reduceScatter(inputs[0], 0, ReduceOp.SUM, ctx.manager())};
        }

        @Override
        public NDArray[] backward(FunctionContext ctx, NDArray... grads) {
            return new NDArray[] {tp.allGather(grads[0], 0, ctx.manager())};
        }

        @Override
        public String name() {
            return "reduce-scatter-to-sequence-parallel-region";
        }
    }

    /**
     * All-to-all between a sequence split ({@code [s/t, ..., h]}) and a hidden split
     * ({@code [s, ..., h/t]}); {@code toHidden} picks the forward direction, backward is the other.
     */
    record AllToAll(Communicator tp, boolean toHidden) implements Function {
        @Override
        public NDArray[] forward(FunctionContext ctx, NDArray... inputs) {
            return new NDArray[] {exchange(inputs[0], toHidden, ctx.manager())};
        }

        @Override
        public NDArray[] backward(FunctionContext ctx, NDArray... grads) {
            return new NDArray[] {exchange(grads[0], !toHidden, ctx.manager())};
        }

        @Override
        public String name() {
            return toHidden ? "all-to-all-sequence-to-hidden" : "all-to-all-hidden-to-sequence";
        }

        private NDArray exchange(NDArray x, boolean sequenceToHidden, NDManager owner) {
            return sequenceToHidden ? sequenceToHidden(tp, x, owner) : hiddenToSequence(tp, x, owner);
        }
    }

    /**
     * {@code [s/t, ..., h]} to {@code [s, ..., h/t]}: hidden chunk {@code j} of every row goes to
     * rank {@code j}, which stacks what it receives in rank (= sequence) order.
     */
    static NDArray sequenceToHidden(Communicator tp, NDArray x, NDManager owner) {
        int n = tp.size();
        int last = x.getShape().dimension() - 1;
        long[] splits = new long[n];
        Arrays.fill(splits, x.getShape().get(0));
        try (NDManager temp = owner.newSubManager()) {
            NDList pieces = new NDList(n);
            for (int j = 0; j < n; j++) {
                NDArray piece = Tensors.chunk(x, last, n, j);
                piece.attach(temp);
                pieces.add(piece);
            }
            NDArray send = NDArrays.concat(pieces, 0);
            send.attach(temp);
            return tp.allToAll(send, splits, splits, owner);
        }
    }

    /**
     * {@code [s, ..., h/t]} to {@code [s/t, ..., h]}: sequence chunk {@code j} goes to rank
     * {@code j}, which concatenates what it receives along the hidden dim in rank order.
     */
    static NDArray hiddenToSequence(Communicator tp, NDArray x, NDManager owner) {
        int n = tp.size();
        int last = x.getShape().dimension() - 1;
        long[] splits = new long[n];
        Arrays.fill(splits, x.getShape().get(0) / n);
        try (NDManager temp = owner.newSubManager()) {
            NDArray received = tp.allToAll(x, splits, splits, temp);
            NDList pieces = new NDList(n);
            for (int i = 0; i < n; i++) {
                NDArray piece = Tensors.chunk(received, 0, n, i);
                piece.attach(temp);
                pieces.add(piece);
            }
            NDArray out = NDArrays.concat(pieces, last);
            out.attach(owner);
            return out;
        }
    }

    /**
     * This rank's chunk along {@code dim}, owned by {@code owner}: a view for dim 0 (already
     * contiguous), a contiguous copy otherwise.
     */
    static NDArray ownChunk(Communicator tp, NDArray x, int dim, NDManager owner) {
        int d = dim < 0 ? dim + x.getShape().dimension() : dim;
        NDArray view = Tensors.chunk(x, d, tp.size(), tp.rank());
        view.attach(owner);
        if (d == 0) {
            return view;
        }
        NDArray copy = view.duplicate();
        copy.attach(owner);
        view.close();
        return copy;
    }
}
