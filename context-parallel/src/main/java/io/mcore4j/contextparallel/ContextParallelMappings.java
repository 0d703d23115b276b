package io.mcore4j.contextparallel;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.autograd.Function;
import io.mcore4j.core.autograd.FunctionContext;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ReduceOp;

import java.util.ArrayList;
import java.util.List;

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

    /**
     * The first all-to-all of {@code a2a} (Ulysses): scatters the heads (dim 2) and gathers the
     * sequence (dim 0), so that this rank holds every token, in position order, for heads
     * {@code [r·h/CP, (r+1)·h/CP)}. Backward is {@link #scatterSequenceGatherHeads}.
     *
     * @param scope the pass's scope
     * @param cp the context-parallel communicator
     * @param x this rank's tokens (its {@link ContextParallelSplit}) {@code [s/CP, b, h, d]}; {@code h} divisible by {@code CP}
     * @return the whole sequence in position order {@code [s, b, h/CP, d]}
     * @throws IllegalArgumentException if {@code h} is not divisible by {@code CP}
     */
    public static NDArray scatterHeadsGatherSequence(AutogradScope scope, Communicator cp, NDArray x) {
        if (cp.size() == 1) {
            return x;
        }
        if (x.getShape().dimension() != 4 || x.getShape().get(2) % cp.size() != 0) {
            throw new IllegalArgumentException("a2a context parallelism scatters the heads (dim 2 of [s, b, h, d]) over "
                    + cp.size() + " ranks; got shape " + x.getShape());
        }
        return scope.apply1(new HeadsToSequence(cp, true), x);
    }

    /**
     * The second all-to-all of {@code a2a}, the transpose of {@link #scatterHeadsGatherSequence}:
     * returns each token's outputs of this rank's heads to the rank that holds the token.
     *
     * @param scope the pass's scope
     * @param cp the context-parallel communicator
     * @param y the whole sequence in position order for this rank's heads {@code [s, b, h/CP, d]}
     * @return this rank's tokens for all heads {@code [s/CP, b, h, d]}
     */
    public static NDArray scatterSequenceGatherHeads(AutogradScope scope, Communicator cp, NDArray y) {
        if (cp.size() == 1) {
            return y;
        }
        return scope.apply1(new HeadsToSequence(cp, false), y);
    }

    /**
     * Heads to sequence ({@code forward == true}) or back: the two are a permutation and its inverse,
     * so each one's backward is the other's forward.
     */
    private record HeadsToSequence(Communicator cp, boolean forward) implements Function {
        @Override
        public NDArray[] forward(FunctionContext ctx, NDArray... inputs) {
            return new NDArray[] {forward ? toSequence(inputs[0], ctx) : toHeads(inputs[0], ctx)};
        }

        @Override
        public NDArray[] backward(FunctionContext ctx, NDArray... grads) {
            return new NDArray[] {forward ? toHeads(grads[0], ctx) : toSequence(grads[0], ctx)};
        }

        /** [s/CP, b, h, d] → all-to-all of head slices → [s, b, h/CP, d] in rank order → position order. */
        private NDArray toSequence(NDArray x, FunctionContext ctx) {
            int n = cp.size();
            Shape shape = x.getShape();
            long l = shape.get(0);
            try (NDManager temp = ctx.manager().newSubManager()) {
                NDArray send = Tensors.own(x.reshape(l, shape.get(1), n, shape.get(2) / n, shape.get(3))
                        .transpose(2, 0, 1, 3, 4).reshape(n * l, shape.get(1), shape.get(2) / n, shape.get(3)), temp);
                NDArray gathered = Tensors.own(cp.allToAll(send, equalSplits(n, l), equalSplits(n, l), temp), temp);
                NDArray ordered = ContextParallelSplit.slices(gathered, 0, positionOrder(n, l));
                ordered.attach(ctx.manager());
                return ordered;
            }
        }

        /** [s, b, h/CP, d] in position order → rank order → all-to-all of token blocks → [s/CP, b, h, d]. */
        private NDArray toHeads(NDArray y, FunctionContext ctx) {
            int n = cp.size();
            Shape shape = y.getShape();
            long l = shape.get(0) / n;
            try (NDManager temp = ctx.manager().newSubManager()) {
                NDArray send = Tensors.own(ContextParallelSplit.slices(y, 0, rankOrder(n, l)), temp);
                NDArray received = Tensors.own(cp.allToAll(send, equalSplits(n, l), equalSplits(n, l), temp), temp);
                NDArray out = received.reshape(n, l, shape.get(1), shape.get(2), shape.get(3)).transpose(1, 2, 0, 3, 4)
                        .reshape(l, shape.get(1), n * shape.get(2), shape.get(3));
                out.attach(ctx.manager());
                return out;
            }
        }

        @Override
        public String name() {
            return forward ? "scatter-heads-gather-sequence-context-parallel" : "scatter-sequence-gather-heads-context-parallel";
        }
    }

    private static long[] equalSplits(int n, long rows) {
        long[] splits = new long[n];
        java.util.Arrays.fill(splits, rows);
        return splits;
    }

    /**
     * Runs of the rank-order sequence (rank r's {@code l} tokens at {@code [r·l, (r+1)·l)}, chunks
     * {@code r} and {@code 2·CP−1−r}) that list the {@code 2·CP} chunks in position order.
     */
    private static List<long[]> positionOrder(int n, long l) {
        long c = l / 2;
        List<long[]> runs = new ArrayList<>(2 * n);
        for (int j = 0; j < 2 * n; j++) {
            long start = j < n ? j * l : (2L * n - 1 - j) * l + c;
            runs.add(new long[] {start, start + c});
        }
        return runs;
    }

    /** Runs of the position-order sequence that list each rank's two chunks in rank order. */
    private static List<long[]> rankOrder(int n, long l) {
        long c = l / 2;
        List<long[]> runs = new ArrayList<>(2 * n);
        for (int r = 0; r < n; r++) {
            runs.add(new long[] {r * c, (r + 1) * c});
            runs.add(new long[] {(2L * n - 1 - r) * c, (2L * n - r) * c});
        }
        return runs;
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
