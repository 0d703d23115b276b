package io.mcore4j.moe;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.parallel.Communicator;

/**
 * Moves routed tokens to the ranks that hold their experts and the expert outputs back. A
 * dispatcher communicates over the expert groups (EP and expert-TP) through autograd Functions, so
 * the transposed communication runs in backward; every rank of those groups must dispatch and
 * combine the same number of times in the same order.
 *
 * <p>Holds what every dispatcher needs to know of the expert layout: the EP and expert-TP groups,
 * the number of experts, this EP rank's contiguous range of local experts, and top-k.
 */
abstract class TokenDispatcher {
    /** The expert-parallel group: each rank holds {@link #numLocalExperts} experts. */
    final Communicator ep;
    /** The expert-tensor-parallel group: its ranks hold parts of the same experts. */
    final Communicator expertTp;
    /** Experts of the layer, E. */
    final int numExperts;
    /** Experts on each EP rank, {@code E / EP}. */
    final int numLocalExperts;
    /** Global index of this rank's first expert. */
    final int firstLocalExpert;
    /** Experts per token. */
    final int topK;
    /** Whether tokens are permuted and unpermuted by one fused call each ({@link FusedTokenPermutation}). */
    final boolean permuteFusion;

    TokenDispatcher(MoeGroups groups, int numExperts, int topK, boolean permuteFusion) {
        this.ep = groups.ep();
        this.expertTp = groups.expertTp();
        this.numExperts = numExperts;
        this.numLocalExperts = numExperts / ep.size();
        this.firstLocalExpert = ep.rank() * numLocalExperts;
        this.topK = topK;
        this.permuteFusion = permuteFusion;
    }

    /**
     * Sends each dispatched (token, expert) pair's token to the rank of its expert.
     *
     * @param scope the pass's scope; owns everything created
     * @param tokens this rank's tokens {@code [T, h]}
     * @param routing the router's decision for those tokens
     * @return the rows for this rank's experts and the way back
     */
    abstract Dispatched dispatch(AutogradScope scope, NDArray tokens, Routing routing);

    /**
     * The group ends of local experts that each receive the same number of rows (a routing padded to capacity), made
     * on the device by one arange, so that neither the host's counts nor a copy from the host is needed (a CUDA graph
     * holds it).
     *
     * @param experts local experts, at least 1
     * @param rows rows of each, at least 1
     * @param owner owns the result, on the rows' device
     * @return {@code [rows, 2·rows, ..., experts·rows]} as int32
     * @throws IllegalArgumentException if the last end is not below 2^24 (the arange's float bounds stay exact below it)
     */
    static NDArray evenEnds(int experts, long rows, NDManager owner) {
        long last = experts * rows;
        if (experts < 1 || rows < 1 || last >= 1 << 24) {
            throw new IllegalArgumentException("group ends of " + experts + " experts of " + rows + " rows each: expected"
                    + " at least one of each and fewer than 2^24 rows in all");
        }
        return owner.arange((int) rows, (int) (last + rows), (int) rows, DataType.INT32);
    }

    /** Where {@link #dispatch(AutogradScope, NDArray, Routing, Runnable, Beside)} runs the work given beside it. */
    enum Beside {
        /**
         * While the host waits for the rows per expert that size the all-to-all: the work is queued behind the counts'
         * copy to the host, so the device runs it while the host waits for the copy alone and then queues the
         * exchange. Where the dispatcher reads no counts, before the dispatch.
         */
        COUNTS,
        /**
         * While the tokens travel to their experts (Megatron's {@code --moe-shared-expert-overlap}): the all-to-all
         * dispatcher with the fused permutation and without expert tensor parallelism starts the all-to-all on the
         * communicator's side stream, runs the work on the caller's, and joins them before the experts read the
         * rows. Elsewhere after the dispatch.
         */
        TRAVEL
    }

    /**
     * {@link #dispatch(AutogradScope, NDArray, Routing)}, with {@code beside} run in the pass's scope (grad mode as the
     * scope's) at the place {@code where} names. The same work either way, in another order: the results agree up to
     * the order in which libtorch's backward sums gradients.
     *
     * @param scope the pass's scope; owns everything created
     * @param tokens this rank's tokens {@code [T, h]}
     * @param routing the router's decision for those tokens
     * @param beside work that reads none of the dispatch's tensors (the shared expert's forward)
     * @param where when it runs
     * @return the rows for this rank's experts and the way back
     */
    Dispatched dispatch(AutogradScope scope, NDArray tokens, Routing routing, Runnable beside, Beside where) {
        if (where == Beside.COUNTS) {
            beside.run();
            return dispatch(scope, tokens, routing);
        }
        Dispatched dispatched = dispatch(scope, tokens, routing);
        beside.run();
        return dispatched;
    }

    /** The rows this rank's experts process, grouped by local expert, and how to return their outputs. */
    interface Dispatched {
        /** @return {@code [N, h]}: the rows of local expert 0, then local expert 1, ... */
        NDArray expertInput();

        /** @return rows per local expert, summing to N */
        long[] tokensPerExpert();

        /**
         * The running sums of {@link #tokensPerExpert()} as an int32 tensor on the rows' device, when the
         * dispatcher has them there without a copy from the host (the grouped GEMM's group ends); else null.
         *
         * @return {@code [E_local]} int32 ends, or null
         */
        default NDArray expertEnds() {
            return null;
        }

        /**
         * Returns the expert outputs to the tokens' ranks and sums each token's outputs weighted by
         * its routing probabilities.
         *
         * @param scope the pass's scope
         * @param expertOutput {@code [N, h]} in the order of {@link #expertInput()} (with expert tensor
         *                     parallelism: this rank's partial sums)
         * @return {@code [T, h]} for this rank's tokens
         */
        NDArray combine(AutogradScope scope, NDArray expertOutput);
    }

    /** A {@link Dispatched} whose combine step is given as a function; {@code expertEnds} may be null. */
    record Rows(NDArray expertInput, long[] tokensPerExpert, NDArray expertEnds, Combiner combiner) implements Dispatched {
        @Override
        public long[] tokensPerExpert() {
            return tokensPerExpert.clone();
        }

        @Override
        public NDArray combine(AutogradScope scope, NDArray expertOutput) {
            return combiner.combine(scope, expertOutput);
        }
    }

    /** The combine step of a {@link Rows}. */
    @FunctionalInterface
    interface Combiner {
        NDArray combine(AutogradScope scope, NDArray expertOutput);
    }
}
