package io.mcore4j.moe;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.autograd.Function;
import io.mcore4j.core.autograd.FunctionContext;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ReduceOp;

import java.util.Arrays;

/**
 * The collectives that move tokens between the ranks of expert groups, each an autograd
 * {@link Function} whose backward is the transposed collective: all-to-all / inverse all-to-all,
 * all-gather / reduce-scatter, and their uneven variants (different row counts per rank) built on
 * {@link Communicator#allToAll}. All work on dim 0 (rows are tokens), are no-ops returning the input
 * when the group has one rank, and must be called by every member of the group in the same order
 * with matching split sizes. Results are owned by the scope's manager.
 */
final class ExpertCommunication {
    private ExpertCommunication() {}

    /**
     * Sends {@code sendSplits[j]} consecutive rows to rank {@code j} and returns the rows received,
     * in rank order; backward sends the gradients back the same way.
     */
    static NDArray allToAll(AutogradScope scope, Communicator group, NDArray x, long[] sendSplits, long[] recvSplits) {
        if (group.size() == 1) {
            return x;
        }
        return scope.apply1(new AllToAll(group, sendSplits.clone(), recvSplits.clone()), x);
    }

    /** Concatenates every rank's equal-sized {@code x} in rank order; backward reduce-scatters (sums). */
    static NDArray allGather(AutogradScope scope, Communicator group, NDArray x) {
        if (group.size() == 1) {
            return x;
        }
        return scope.apply1(new AllGather(group), x);
    }

    /** Sums {@code x} over the group and keeps this rank's equal chunk of rows; backward all-gathers. */
    static NDArray reduceScatter(AutogradScope scope, Communicator group, NDArray x) {
        if (group.size() == 1) {
            return x;
        }
        return scope.apply1(new ReduceScatter(group), x);
    }

    /**
     * Concatenates every rank's {@code x} ({@code sizes[r]} rows on rank {@code r}) in rank order;
     * backward sums the gradient over the group and keeps this rank's rows.
     */
    static NDArray unevenAllGather(AutogradScope scope, Communicator group, NDArray x, long[] sizes) {
        if (group.size() == 1) {
            return x;
        }
        return scope.apply1(new UnevenAllGather(group, sizes.clone()), x);
    }

    /**
     * Sums {@code x} (rows of every rank, {@code sizes[r]} of them for rank {@code r}, in rank order)
     * over the group and keeps this rank's rows; backward all-gathers the gradient.
     */
    static NDArray unevenReduceScatter(AutogradScope scope, Communicator group, NDArray x, long[] sizes) {
        if (group.size() == 1) {
            return x;
        }
        return scope.apply1(new UnevenReduceScatter(group, sizes.clone()), x);
    }

    /** Uneven all-gather as an all-to-all that sends the whole input to every rank. */
    static NDArray gatherUneven(Communicator group, NDArray x, long[] sizes, NDManager owner) {
        int n = group.size();
        long mine = x.getShape().get(0);
        if (mine != sizes[group.rank()]) {
            throw new IllegalArgumentException(group.group().key() + " uneven all-gather: " + mine
                    + " local rows but the sizes " + Arrays.toString(sizes) + " say " + sizes[group.rank()]);
        }
        long[] send = new long[n];
        Arrays.fill(send, mine);
        try (NDManager temp = owner.newSubManager()) {
            long[] repeats = new long[x.getShape().dimension()];
            Arrays.fill(repeats, 1);
            repeats[0] = n;
            NDArray copies = Tensors.own(x.tile(repeats), temp);
            return group.allToAll(copies, send, sizes, owner);
        }
    }

    /** Uneven reduce-scatter as an all-to-all of each rank's block followed by a local sum in rank order. */
    static NDArray reduceScatterUneven(Communicator group, NDArray x, long[] sizes, NDManager owner) {
        int n = group.size();
        long mine = sizes[group.rank()];
        long[] recv = new long[n];
        Arrays.fill(recv, mine);
        try (NDManager temp = owner.newSubManager()) {
            NDArray received = group.allToAll(x, sizes, recv, temp);
            long[] shape = received.getShape().getShape().clone();
            long[] blocks = new long[shape.length + 1];
            blocks[0] = n;
            blocks[1] = mine;
            System.arraycopy(shape, 1, blocks, 2, shape.length - 1);
            NDArray sum = received.reshape(blocks).sum(new int[] {0});
            return Tensors.own(sum, owner);
        }
    }

    /** Forward all-to-all, backward the inverse all-to-all. */
    private record AllToAll(Communicator group, long[] send, long[] recv) implements Function {
        @Override
        public NDArray[] forward(FunctionContext ctx, NDArray... inputs) {
            return new NDArray[] {group.allToAll(inputs[0], send, recv, ctx.manager())};
        }

        @Override
        public NDArray[] backward(FunctionContext ctx, NDArray... grads) {
            return new NDArray[] {group.allToAll(grads[0], recv, send, ctx.manager())};
        }

        @Override
        public String name() {
            return "moe-all-to-all(" + group.group().key() + ")";
        }
    }

    /** Forward all-gather along dim 0, backward reduce-scatter (sum). */
    private record AllGather(Communicator group) implements Function {
        @Override
        public NDArray[] forward(FunctionContext ctx, NDArray... inputs) {
            return new NDArray[] {group.allGather(inputs[0], 0, ctx.manager())};
        }

        @Override
        public NDArray[] backward(FunctionContext ctx, NDArray... grads) {
            return new NDArray[] {group.reduceScatter(grads[0], 0, ReduceOp.SUM, ctx.manager())};
        }

        @Override
        public String name() {
            return "moe-all-gather(" + group.group().key() + ")";
        }
    }

    /** Forward reduce-scatter (sum) along dim 0, backward all-gather. */
    private record ReduceScatter(Communicator group) implements Function {
        @Override
        public NDArray[] forward(FunctionContext ctx, NDArray... inputs) {
            return new NDArray[] {group.reduceScatter(inputs[0], 0, ReduceOp.SUM, ctx.manager())};
        }

        @Override
        public NDArray[] backward(FunctionContext ctx, NDArray... grads) {
            return new NDArray[] {group.allGather(grads[0], 0, ctx.manager())};
        }

        @Override
        public String name() {
            return "moe-reduce-scatter(" + group.group().key() + ")";
        }
    }

    /** Forward uneven all-gather, backward uneven reduce-scatter. */
    private record UnevenAllGather(Communicator group, long[] sizes) implements Function {
        @Override
        public NDArray[] forward(FunctionContext ctx, NDArray... inputs) {
            return new NDArray[] {gatherUneven(group, inputs[0], sizes, ctx.manager())};
        }

        @Override
        public NDArray[] backward(FunctionContext ctx, NDArray... grads) {
            return new NDArray[] {reduceScatterUneven(group, grads[0], sizes, ctx.manager())};
        }

        @Override
        public String name() {
            return "moe-uneven-all-gather(" + group.group().key() + ")";
        }
    }

    /** Forward uneven reduce-scatter, backward uneven all-gather. */
    private record UnevenReduceScatter(Communicator group, long[] sizes) implements Function {
        @Override
        public NDArray[] forward(FunctionContext ctx, NDArray... inputs) {
            return new NDArray[] {reduceScatterUneven(group, inputs[0], sizes, ctx.manager())};
        }

        @Override
        public NDArray[] backward(FunctionContext ctx, NDArray... grads) {
            return new NDArray[] {gatherUneven(group, grads[0], sizes, ctx.manager())};
        }

        @Override
        public String name() {
            return "moe-uneven-reduce-scatter(" + group.group().key() + ")";
        }
    }
}
