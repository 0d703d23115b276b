package io.mcore4j.moe;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDArrays;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.autograd.Function;
import io.mcore4j.core.autograd.FunctionContext;
import io.mcore4j.parallel.ChunkLayout;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.PendingCollective;

import java.util.Arrays;

/**
 * All-to-all dispatch (Megatron-Core's {@code MoEAlltoAllTokenDispatcher}): this rank permutes its
 * dispatched pairs into expert order, exchanges per-expert counts over EP (one all-gather of
 * {@code E} longs, read by the host together with its own counts in one copy), sends each EP rank the rows of its experts with an uneven all-to-all, all-gathers
 * the received rows over expert-TP (uneven) when experts are tensor-parallel, and sorts them by local
 * expert. Combine runs the inverse: unsort, uneven reduce-scatter over expert-TP (summing the
 * partial outputs), the inverse all-to-all, and the probability-weighted sum per token.
 *
 * <p>Only routed rows travel, so the volume follows the routing; the counts must reach the host to
 * size the all-to-all (a synchronisation point on accelerators, as in Megatron-Core): one read per
 * dispatch, two with expert tensor parallelism. A routing padded to capacity needs neither: every rank sends each
 * expert {@link Routing#rowsPerExpert()} rows, so the dispatch never waits for the device (a CUDA graph holds it, as
 * in Megatron-Core, whose graphs take MoE layers only so). The all-to-all, the expert-TP gather and the sort by
 * local expert are one autograd Function each way ({@code Exchange}), so that the rows between them are
 * not kept for backward. Without expert tensor parallelism the all-to-all places each (source, local expert)
 * chunk at its sorted place itself ({@link Communicator#allToAllChunks}), with no sort after it.
 *
 * <p>With the fused permutation and dropless routing the permutation is issued before the counts are read (its
 * T·k pairs do not depend on them), and the exchange back runs inside the combine's Function
 * ({@link FusedTokenPermutation#combine(NDArray, NDArray, FusedTokenPermutation.RowsExchange, AutogradScope)}).
 */
final class AllToAllTokenDispatcher extends TokenDispatcher {
    /** Whether the dispatch hands the experts their group ends on the device (for libtorch's grouped kernel). */
    private final boolean groupEnds;

    AllToAllTokenDispatcher(MoeGroups groups, int numExperts, int topK, boolean permuteFusion) {
        this(groups, numExperts, topK, permuteFusion, true);
    }

    AllToAllTokenDispatcher(MoeGroups groups, int numExperts, int topK, boolean permuteFusion, boolean groupEnds) {
        super(groups, numExperts, topK, permuteFusion);
        this.groupEnds = groupEnds;
    }

    @Override
    Dispatched dispatch(AutogradScope scope, NDArray tokens, Routing routing) {
        return dispatch(scope, tokens, routing, null, Beside.COUNTS);
    }

    /**
     * {@inheritDoc}
     *
     * <p>Here: {@link Beside#COUNTS} work is queued after the counts' copy to the host and before the host waits for
     * it ({@link CountsReadback}). {@link Beside#TRAVEL}: with the fused permutation and the all-to-all placing each
     * chunk itself (no expert tensor parallelism), the permutation and the start of the all-to-all on the EP
     * communicator's side stream are one Function, {@code beside} runs next, and a second Function ({@code Arrival},
     * the identity) joins the side stream before the experts read the rows and frees the permuted rows the all-to-all
     * read; otherwise after the dispatch. {@code beside} may be null: nothing runs.
     */
    @Override
    Dispatched dispatch(AutogradScope scope, NDArray tokens, Routing routing, Runnable beside, Beside where) {
        NDManager m = scope.manager();
        // without a capacity every token keeps its top k pairs
        int pairsPerToken = routing.capacity() < 0 && routing.numTokens() > 0
                ? Math.min(routing.topK(), routing.numExperts()) : 0;
        NDArray[] ends = new NDArray[1];
        long[][] countsByRank; // [EP rank][global expert]
        FusedTokenPermutation.Ahead ahead = null;
        long padded = routing.rowsPerExpert();
        if (padded >= 0) {
            // padded to capacity: every EP rank (all have T tokens) sends each expert the same rows, known without
            // reading the map, so nothing here waits for the device
            countsByRank = new long[ep.size()][numExperts];
            for (long[] rank : countsByRank) {
                Arrays.fill(rank, padded);
            }
            if (groupEnds) {
                ends[0] = evenEnds(numLocalExperts, padded * ep.size() * expertTp.size(), m);
            }
            if (beside != null && where == Beside.COUNTS) {
                beside.run();
            }
        } else {
            try (NDManager temp = m.newSubManager()) {
                if (permuteFusion && pairsPerToken > 0 && (ep.size() > 1 || expertTp.size() > 1)) {
                    // T·k pairs whatever the counts: the device permutes while the host waits for the counts
                    ahead = FusedTokenPermutation.ahead(tokens, routing.routingMap(), routing.indices(), pairsPerToken, m);
                }
                // this rank's rows per expert (from the permutation's call where it gives them) and every EP peer's, read
                // in one device-to-host copy
                NDArray mine = ahead != null && ahead.counts() != null ? ahead.counts()
                        : columnSums(routing.routingMap(), temp);
                NDArray gathered = gatherCounts(ep, mine, temp, groupEnds && expertTp.size() == 1 ? firstLocalExpert : -1,
                        numLocalExperts, ends, m);
                countsByRank = readCounts(gathered, ep.size(), where == Beside.COUNTS ? beside : null);
            }
        }
        long[] counts = countsByRank[ep.rank()];
        TokenPermutation permutation = ahead != null ? ahead.permutation(counts)
                : TokenPermutation.of(routing.routingMap(), m, permuteFusion, counts, pairsPerToken, routing.indices());

        int epSize = ep.size();
        long[] send = new long[epSize];
        long[] recv = new long[epSize];
        for (int j = 0; j < epSize; j++) {
            send[j] = TokenPermutation.sum(counts, j * numLocalExperts, (j + 1) * numLocalExperts);
            recv[j] = TokenPermutation.sum(countsByRank[j], firstLocalExpert, firstLocalExpert + numLocalExperts);
        }
        // rows per (source EP rank, local expert) here, then gathered from every expert-TP peer
        long[] mine = new long[epSize * numLocalExperts];
        for (int i = 0; i < epSize; i++) {
            for (int l = 0; l < numLocalExperts; l++) {
                mine[i * numLocalExperts + l] = countsByRank[i][firstLocalExpert + l];
            }
        }
        long[][] chunks = expertTp.size() == 1 ? new long[][] {mine}
                : padded >= 0 ? repeat(mine, expertTp.size()) : gatherHostCounts(expertTp, mine, m);
        long[] perPeer = new long[chunks.length];
        for (int p = 0; p < chunks.length; p++) {
            perPeer[p] = TokenPermutation.sum(chunks[p], 0, chunks[p].length);
        }
        ChunkOrder order = ChunkOrder.byLocalExpert(chunks, numLocalExperts);
        // without expert tensor parallelism the all-to-all itself places each (source, local expert) chunk where the
        // sort by local expert puts it: each peer's rows for this rank cut by local expert, and this rank's for each
        // peer by that peer's local experts
        ChunkLayout[] layouts = null;
        if (expertTp.size() == 1 && epSize > 1) {
            long[][] outgoing = new long[epSize][numLocalExperts];
            for (int j = 0; j < epSize; j++) {
                System.arraycopy(counts, j * numLocalExperts, outgoing[j], 0, numLocalExperts);
            }
            layouts = new ChunkLayout[] {ChunkLayout.consecutive(outgoing), order.sortedLayout(epSize, numLocalExperts)};
        }
        Exchange exchange = new Exchange(ep, expertTp, send, recv, perPeer, order, layouts);
        NDArray expertInput;
        Runnable whileTravelling = where == Beside.TRAVEL ? beside : null;
        Runnable after = whileTravelling;
        if (exchange.isIdentity()) {
            expertInput = permutation.permute(tokens, m);
        } else if (permutation instanceof FusedTokenPermutation fused && whileTravelling != null && layouts != null) {
            Travel travel = new Travel();
            NDArray travelling = scope.apply1(new PermuteAndExchange(fused, exchange, travel), tokens,
                    routing.routingMap());
            whileTravelling.run();
            after = null;
            expertInput = scope.apply1(new Arrival(travel, exchange.ep.group().key()), travelling);
        } else if (permutation instanceof FusedTokenPermutation fused) {
            // the permutation inside the exchange's Function: the permuted rows are not kept for backward
            expertInput = scope.apply1(new PermuteAndExchange(fused, exchange, null), tokens, routing.routingMap());
        } else {
            expertInput = scope.apply1(exchange.toExperts(), permutation.permute(tokens, m));
        }
        if (after != null) {
            after.run();
        }
        int slots = Math.min(topK, numExperts);
        return new Rows(expertInput, order.rowsPerExpert, ends[0], (s, expertOutput) -> {
            if (!exchange.isIdentity() && permutation instanceof FusedTokenPermutation fused
                    && fused.combinesByGathers()) {
                // the exchange back inside the combine's Function: one autograd node for both
                return fused.combine(expertOutput, routing.probs(), exchange.rowsExchange(), s);
            }
            NDArray back = exchange.isIdentity() ? expertOutput : s.apply1(exchange.fromExperts(), expertOutput);
            return permutation.combine(back, routing.keptMap(), routing.probs(), slots, s);
        });
    }

    /**
     * Every EP rank's column sums of its routing map ({@code mine}: this rank's, {@code [1, E]} int64), {@code [ranks,
     * E]} in rank order, on the device (one all-gather; {@link #readCounts} brings them to the host in one copy, the
     * one synchronisation of the dispatch).
     * With {@code firstLocal >= 0} also the group ends of the experts {@code [firstLocal, firstLocal + local)} over
     * all sources (the running sums of their rows) into {@code ends[0]}, owned by {@code endsOwner}, computed on the
     * device from the gathered counts, so that the grouped GEMM needs no copy from the host (which would wait for the
     * device).
     */
    private static NDArray gatherCounts(Communicator group, NDArray mine, NDManager temp, int firstLocal,
                                        int local, NDArray[] ends, NDManager endsOwner) {
        NDArray gathered = group.size() == 1 ? mine : Tensors.own(group.allGather(mine, 0, temp), temp);
        if (firstLocal >= 0) {
            NDArray columns = Tensors.own(Tensors.narrow(gathered, 1, firstLocal, firstLocal + local), temp);
            NDArray rows = Tensors.own(columns.sum(new int[] {0}), temp);
            ends[0] = Tensors.own(Tensors.own(rows.cumSum(0), temp).toType(DataType.INT32, false), endsOwner);
        }
        return gathered;
    }

    /** The column sums of a {@code [T, E]} 0/1 map as {@code [1, E]} int64, owned by {@code owner}. */
    private static NDArray columnSums(NDArray routingMap, NDManager owner) {
        int experts = (int) routingMap.getShape().get(1);
        return Tensors.own(Tensors.own(routingMap.sum(new int[] {0}), owner).toType(DataType.INT64, false)
                .reshape(1, experts), owner);
    }

    /**
     * {@link #gatherCounts}'s counts on the host: {@code [EP rank][global expert]}; waits for the device's copy of
     * them, with {@code beside} (if not null) queued after the copy.
     */
    private static long[][] readCounts(NDArray gathered, int ranks, Runnable beside) {
        long[] all = CountsReadback.read(gathered, beside);
        int experts = all.length / ranks;
        long[][] out = new long[ranks][experts];
        for (int r = 0; r < ranks; r++) {
            System.arraycopy(all, r * experts, out[r], 0, experts);
        }
        return out;
    }

    /** {@code times} references to {@code values}: every expert-TP peer's counts where all are the same. */
    private static long[][] repeat(long[] values, int times) {
        long[][] out = new long[times][];
        Arrays.fill(out, values);
        return out;
    }

    /** Every rank's {@code values} (same length on all), in rank order; one all-gather of longs. */
    private static long[][] gatherHostCounts(Communicator group, long[] values, NDManager owner) {
        try (NDManager temp = owner.newSubManager()) {
            NDArray local = temp.create(values, new Shape(1, values.length));
            long[] all = group.allGather(local, 0, temp).toLongArray();
            long[][] out = new long[group.size()][values.length];
            for (int r = 0; r < out.length; r++) {
                System.arraycopy(all, r * values.length, out[r], 0, values.length);
            }
            return out;
        }
    }

    /**
     * The exchange between this rank's permuted rows and its experts' rows, as one autograd Function each way:
     * towards the experts the all-to-all over EP, the uneven all-gather over expert-TP and the sort of the chunks
     * by local expert (one split and one concatenation); back from them the reverse (unsort, uneven
     * reduce-scatter, inverse all-to-all). Each direction's backward is the other direction. The intermediate
     * rows of a direction (the received rows before the sort, the unsorted rows before the all-to-all) live only
     * inside its call: the exchange is linear, so its backward needs none of them.
     */
    private static final class Exchange {
        final Communicator ep;
        final Communicator expertTp;
        final long[] send;
        final long[] recv;
        final long[] perPeer;
        final ChunkOrder order;
        /** The permuted rows' chunks and the experts' rows' chunks, for an all-to-all that sorts as it goes; or null. */
        final ChunkLayout[] layouts;

        Exchange(Communicator ep, Communicator expertTp, long[] send, long[] recv, long[] perPeer, ChunkOrder order,
                 ChunkLayout[] layouts) {
            this.ep = ep;
            this.expertTp = expertTp;
            this.send = send;
            this.recv = recv;
            this.perPeer = perPeer;
            this.order = order;
            this.layouts = layouts;
        }

        /** Whether both directions are the identity (one EP rank, one expert-TP rank). */
        boolean isIdentity() {
            return ep.size() == 1 && expertTp.size() == 1 && order.isIdentity();
        }

        /** @return the permuted rows to the experts' rows */
        Function toExperts() {
            return new Direction(this, true);
        }

        /** @return the experts' rows back to the permuted rows */
        Function fromExperts() {
            return new Direction(this, false);
        }

        /** @return the way back from the experts and its transpose, for a combine that runs them in its Function */
        FusedTokenPermutation.RowsExchange rowsExchange() {
            return new FusedTokenPermutation.RowsExchange() {
                @Override
                public NDArray back(NDArray expertRows, NDManager owner) {
                    return Exchange.this.backward(expertRows, owner);
                }

                @Override
                public NDArray forth(NDArray pairRows, NDManager owner) {
                    return Exchange.this.forward(pairRows, owner);
                }

                @Override
                public String name() {
                    return "moe-exchange-from-experts(" + ep.group().key() + ")";
                }
            };
        }

        /**
         * {@link #forward} with chunk layouts, started on the EP communicator's side stream into {@code out}
         * ({@link Communicator#startAllToAllChunks}); {@code x} must stay open until the exchange is joined.
         */
        PendingCollective start(NDArray x, NDArray out) {
            return ep.startAllToAllChunks(x, layouts[0], layouts[1], out);
        }

        NDArray forward(NDArray x, NDManager owner) {
            if (layouts != null) {
                return ep.allToAllChunks(x, layouts[0], layouts[1], owner);
            }
            try (NDManager temp = owner.newSubManager()) {
                NDArray received = ep.size() == 1 ? x : ep.allToAll(x, send, recv, temp);
                NDArray gathered = expertTp.size() == 1 ? received
                        : ExpertCommunication.gatherUneven(expertTp, received, perPeer, temp);
                NDArray out = order.sort(gathered, temp);
                out.attach(owner);
                return out;
            }
        }

        NDArray backward(NDArray y, NDManager owner) {
            if (layouts != null) {
                return ep.allToAllChunks(y, layouts[1], layouts[0], owner);
            }
            try (NDManager temp = owner.newSubManager()) {
                NDArray unsorted = order.unsort(y, temp);
                NDArray own = expertTp.size() == 1 ? unsorted
                        : ExpertCommunication.reduceScatterUneven(expertTp, unsorted, perPeer, temp);
                NDArray out = ep.size() == 1 ? own : ep.allToAll(own, recv, send, temp);
                out.attach(owner);
                return out;
            }
        }
    }

    /**
     * The fused permutation and the exchange towards the experts as one Function of the tokens, whose backward
     * is the exchange back and the permutation's transpose (a sum of each token's rows, by the unpermute
     * module with weights 1): the permuted rows live only inside the call. The routing map is an input (with no
     * gradient) so that the scope keeps it for the backward, whatever frame the layer runs in. With a
     * {@code travel}, forward only starts the exchange (on the side stream, into the rows it returns, which must not
     * be read before {@link Arrival}) and hands the permuted rows to the travel, which frees them once joined.
     */
    private record PermuteAndExchange(FusedTokenPermutation permutation, Exchange exchange, Travel travel)
            implements Function {
        @Override
        public NDArray[] forward(FunctionContext ctx, NDArray... inputs) {
            if (travel != null) {
                travel.rows = ctx.manager().newSubManager();
                NDArray rows = permutation.permute(inputs[0], ctx.manager(), travel.rows);
                NDArray out = DataTypes.empty(ctx.manager(), new Shape(exchange.layouts[1].rows()).addAll(
                        rows.getShape().slice(1)), DataTypes.of(rows), rows.getDevice());
                travel.pending = exchange.start(rows, out);
                return new NDArray[] {out};
            }
            try (NDManager temp = ctx.manager().newSubManager()) {
                NDArray rows = permutation.permute(inputs[0], ctx.manager(), temp);
                return new NDArray[] {exchange.forward(rows, ctx.manager())};
            }
        }

        @Override
        public NDArray[] backward(FunctionContext ctx, NDArray... grads) {
            try (NDManager temp = ctx.manager().newSubManager()) {
                NDArray rows = exchange.backward(grads[0], temp);
                NDArray tokens = permutation.sumRowsPerToken(rows);
                tokens.attach(ctx.manager());
                return new NDArray[] {tokens, null};
            }
        }

        @Override
        public String name() {
            return "moe-permute-and-exchange(" + exchange.ep.group().key() + ")";
        }
    }

    /** An exchange started towards the experts: the permuted rows it reads (their manager) and its completion. */
    private static final class Travel {
        NDManager rows;
        PendingCollective pending;
    }

    /**
     * The end of a started exchange, the identity on its rows: forward joins the side stream (the caller's stream
     * waits for the all-to-all) and frees the permuted rows it read; backward hands the gradient on.
     */
    private record Arrival(Travel travel, String group) implements Function {
        @Override
        public NDArray[] forward(FunctionContext ctx, NDArray... inputs) {
            NDArray rows = travel.pending.await();
            travel.rows.close();
            return new NDArray[] {rows};
        }

        @Override
        public NDArray[] backward(FunctionContext ctx, NDArray... grads) {
            return new NDArray[] {grads[0]};
        }

        @Override
        public String name() {
            return "moe-exchange-arrival(" + group + ")";
        }
    }

    /** One direction of an {@link Exchange}. */
    private record Direction(Exchange exchange, boolean toExperts) implements Function {
        @Override
        public NDArray[] forward(FunctionContext ctx, NDArray... inputs) {
            return new NDArray[] {toExperts ? exchange.forward(inputs[0], ctx.manager())
                    : exchange.backward(inputs[0], ctx.manager())};
        }

        @Override
        public NDArray[] backward(FunctionContext ctx, NDArray... grads) {
            return new NDArray[] {toExperts ? exchange.backward(grads[0], ctx.manager())
                    : exchange.forward(grads[0], ctx.manager())};
        }

        @Override
        public String name() {
            return "moe-exchange-" + (toExperts ? "to" : "from") + "-experts(" + exchange.ep.group().key() + ")";
        }
    }

    /**
     * The reordering of gathered rows from chunk order (expert-TP peer, source EP rank, local expert)
     * to local-expert order (local expert, peer, source), chunk by chunk (Megatron-Core's
     * {@code sort_chunks_by_idxs}): no index per row, nothing to copy to the device.
     */
    private static final class ChunkOrder {
        /** Chunk sizes in chunk order. */
        final long[] sizes;
        /** The chunks (by chunk-order index) in local-expert order. */
        final int[] order;
        /** Chunk sizes in local-expert order. */
        final long[] sortedSizes;
        /** For each chunk in chunk order, its place in local-expert order. */
        final int[] inverse;
        final long[] rowsPerExpert;

        private ChunkOrder(long[] sizes, int[] order, long[] rowsPerExpert) {
            this.sizes = sizes;
            this.order = order;
            this.rowsPerExpert = rowsPerExpert;
            this.sortedSizes = new long[order.length];
            this.inverse = new int[order.length];
            for (int j = 0; j < order.length; j++) {
                sortedSizes[j] = sizes[order[j]];
                inverse[order[j]] = j;
            }
        }

        static ChunkOrder byLocalExpert(long[][] chunks, int numLocalExperts) {
            int peers = chunks.length;
            int perPeer = chunks[0].length;
            int sources = perPeer / numLocalExperts;
            long[] sizes = new long[peers * perPeer];
            for (int p = 0; p < peers; p++) {
                System.arraycopy(chunks[p], 0, sizes, p * perPeer, perPeer);
            }
            int[] order = new int[sizes.length];
            long[] perExpert = new long[numLocalExperts];
            int next = 0;
            for (int l = 0; l < numLocalExperts; l++) {
                for (int p = 0; p < peers; p++) {
                    for (int i = 0; i < sources; i++) {
                        int c = p * perPeer + i * numLocalExperts + l;
                        order[next++] = c;
                        perExpert[l] += sizes[c];
                    }
                }
            }
            return new ChunkOrder(sizes, order, perExpert);
        }

        /**
         * Where the chunks of one expert-TP peer's rows lie after the sort: chunk {@code (source i, local expert l)}
         * at the sorted place of chunk {@code i * local + l} (with one expert-TP peer, the chunk order is by source,
         * then local expert).
         *
         * @param sources EP ranks
         * @param local local experts
         * @return sizes and offsets per source, by local expert
         */
        ChunkLayout sortedLayout(int sources, int local) {
            long[] start = new long[order.length];
            for (int j = 1; j < order.length; j++) {
                start[j] = start[j - 1] + sortedSizes[j - 1];
            }
            long[][] chunkSizes = new long[sources][local];
            long[][] offsets = new long[sources][local];
            for (int i = 0; i < sources; i++) {
                for (int l = 0; l < local; l++) {
                    chunkSizes[i][l] = sizes[i * local + l];
                    offsets[i][l] = start[inverse[i * local + l]];
                }
            }
            return new ChunkLayout(chunkSizes, offsets, Arrays.stream(sizes).sum());
        }

        boolean isIdentity() {
            return isIdentityOrder(order);
        }

        /** Chunk order to local-expert order: one split, one concatenation. */
        NDArray sort(NDArray rows, NDManager owner) {
            return reorder(rows, sizes, order, owner);
        }

        /** Local-expert order back to chunk order. */
        NDArray unsort(NDArray rows, NDManager owner) {
            return reorder(rows, sortedSizes, inverse, owner);
        }

        /** {@code rows} cut into chunks of {@code sizes}, concatenated in the order {@code order} names them. */
        private static NDArray reorder(NDArray rows, long[] sizes, int[] order, NDManager owner) {
            if (isIdentityOrder(order)) {
                return rows;
            }
            NDList parts = Tensors.split(rows, sizes, 0);
            parts.attach(owner);
            NDList picked = new NDList(order.length);
            for (int c : order) {
                if (sizes[c] > 0) {
                    picked.add(parts.get(c));
                }
            }
            if (picked.isEmpty()) {
                return rows;
            }
            return picked.size() == 1 ? picked.get(0) : Tensors.own(NDArrays.concat(picked, 0), owner);
        }

        private static boolean isIdentityOrder(int[] order) {
            for (int j = 0; j < order.length; j++) {
                if (order[j] != j) {
                    return false;
                }
            }
            return true;
        }
    }

    @Override
    public String toString() {
        return "AllToAllTokenDispatcher{experts " + firstLocalExpert + ".." + (firstLocalExpert + numLocalExperts - 1)
                + " of " + numExperts + ", ep " + ep.group().key() + ", expert-tp " + expertTp.group().key() + "}";
    }
}
