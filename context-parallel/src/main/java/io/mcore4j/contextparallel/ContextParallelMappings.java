package io.mcore4j.contextparallel;

import ai.djl.ndarray.NDArray;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.autograd.Function;
import io.mcore4j.core.autograd.FunctionContext;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ReduceOp;

/**
 * The exchanges of keys and values across the context-parallel group, each an autograd
 * {@link Function} applied through the caller's scope so that its transpose runs in backward.
 *
 * <p>Tensors are sequence-first ({@code [s, ...]}, dim 0 the sequence). Every method communicates
 * over {@code cp} only, must be called by every member of the group in the same order, and returns
 * {@code x} itself when {@code cp.size() == 1}. Results are owned by the scope's manager.
 */
public final class ContextParallelMappings {
    private ContextParallelMappings() {}

    /**
     * All-gathers the sequence (dim 0) in rank order: rank {@code r}'s {@code [s/CP, ...]} becomes
     * rows {@code [r·s/CP, (r+1)·s/CP)} of the result, whose positions are
     * {@link ContextParallelSplit#gatheredPositions}. Backward reduce-scatters (sums) the gradient
     * along dim 0: every rank's queries contribute to every rank's keys and values.
     *
     * @param scope the pass's scope
     * @param cp the context-parallel communicator
     * @param x this rank's keys or values {@code [s/CP, ...]}
     * @return the whole sequence's {@code [s, ...]}
     */
    public static NDArray allGatherSequence(AutogradScope scope, Communicator cp, NDArray x) {
        if (cp.size() == 1) {
            return x;
        }
        if (x.getShape().dimension() == 0) {
            throw new IllegalArgumentException("a scalar cannot be gathered across context-parallel ranks");
        }
        return scope.apply1(new AllGatherSequence(cp), x);
    }

    /**
     * Passes {@code x} one step around the ring of the group: this rank sends it to rank
     * {@code r+1} and returns what rank {@code r−1} sent (indices modulo the size). Backward passes
     * the gradient the other way. The exchange is one all-to-all with a single non-empty slice,
     * so it cannot deadlock whether a backend's sends are buffered or synchronous.
     *
     * @param scope the pass's scope
     * @param cp the context-parallel communicator
     * @param x this rank's block, sequence-first (at least one dim)
     * @return the previous rank's block, of the same shape and dtype
     */
    public static NDArray ringShift(AutogradScope scope, Communicator cp, NDArray x) {
        if (cp.size() == 1) {
            return x;
        }
        return scope.apply1(new RingShift(cp), x);
    }

    /** All-gather along dim 0 forward, reduce-scatter (sum) along dim 0 backward. */
    private record AllGatherSequence(Communicator cp) implements Function {
        @Override
        public NDArray[] forward(FunctionContext ctx, NDArray... inputs) {
            return new NDArray[] {cp.allGather(inputs[0], 0, ctx.manager())};
        }

        @Override
        public NDArray[] backward(FunctionContext ctx, NDArray... grads) {
            return new NDArray[] {cp.reduceScatter(grads[0], 0, ReduceOp.SUM, ctx.manager())};
        }

        @Override
        public String name() {
            return "all-gather-context-parallel-sequence";
        }
    }

    /** Send to the next rank and receive from the previous forward; the reverse backward. */
    private record RingShift(Communicator cp) implements Function {
        @Override
        public NDArray[] forward(FunctionContext ctx, NDArray... inputs) {
            return new NDArray[] {shift(inputs[0], 1, ctx)};
        }

        @Override
        public NDArray[] backward(FunctionContext ctx, NDArray... grads) {
            return new NDArray[] {shift(grads[0], -1, ctx)};
        }

        /**
         * One all-to-all in which only the neighbour's slice is non-empty: a group of one send and
         * one receive on NCCL, so no backend can deadlock on a ring of synchronous sends.
         */
        private NDArray shift(NDArray x, int direction, FunctionContext ctx) {
            int n = cp.size();
            int to = Math.floorMod(cp.rank() + direction, n);
            int from = Math.floorMod(cp.rank() - direction, n);
            long rows = x.getShape().get(0);
            long[] send = new long[n];
            long[] recv = new long[n];
            send[to] = rows;
            recv[from] = rows;
            return cp.allToAll(x, send, recv, ctx.manager());
        }

        @Override
        public String name() {
            return "ring-shift-context-parallel";
        }
    }
}
