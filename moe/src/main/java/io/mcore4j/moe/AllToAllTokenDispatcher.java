package io.mcore4j.moe;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.parallel.Communicator;

/**
 * All-to-all dispatch (Megatron-Core's {@code MoEAlltoAllTokenDispatcher}): this rank permutes its
 * dispatched pairs into expert order, exchanges per-expert counts over EP (one all-gather of
 * {@code E} longs), sends each EP rank the rows of its experts with an uneven all-to-all, all-gathers
 * the received rows over expert-TP (uneven) when experts are tensor-parallel, and sorts them by local
 * expert. Combine runs the inverse: unsort, uneven reduce-scatter over expert-TP (summing the
 * partial outputs), the inverse all-to-all, and the probability-weighted sum per token.
 *
 * <p>Only routed rows travel, so the volume follows the routing; the counts must reach the host to
 * size the all-to-all (a synchronisation point on accelerators, as in Megatron-Core).
 */
final class AllToAllTokenDispatcher extends TokenDispatcher {
    AllToAllTokenDispatcher(MoeGroups groups, int numExperts, int topK, boolean permuteFusion) {
        super(groups, numExperts, topK, permuteFusion);
    }

    @Override
    Dispatched dispatch(AutogradScope scope, NDArray tokens, Routing routing) {
        NDManager m = scope.manager();
        TokenPermutation permutation = TokenPermutation.of(routing.routingMap(), m, permuteFusion);
        long[] counts = permutation.tokensPerExpert();
        NDArray permuted = permutation.permute(tokens, m);

        int epSize = ep.size();
        long[][] countsByRank = gatherCounts(ep, counts, m); // [EP rank][global expert]
        long[] send = new long[epSize];
        long[] recv = new long[epSize];
        for (int j = 0; j < epSize; j++) {
            send[j] = TokenPermutation.sum(counts, j * numLocalExperts, (j + 1) * numLocalExperts);
            recv[j] = TokenPermutation.sum(countsByRank[j], firstLocalExpert, firstLocalExpert + numLocalExperts);
        }
        NDArray received = ExpertCommunication.allToAll(scope, ep, permuted, send, recv);

        // rows per (source EP rank, local expert) here, then gathered from every expert-TP peer
        long[] mine = new long[epSize * numLocalExperts];
        for (int i = 0; i < epSize; i++) {
            for (int l = 0; l < numLocalExperts; l++) {
                mine[i * numLocalExperts + l] = countsByRank[i][firstLocalExpert + l];
            }
        }
        long[][] chunks = gatherCounts(expertTp, mine, m); // [expert-TP peer][source * local expert]
        long[] perPeer = new long[chunks.length];
        for (int p = 0; p < chunks.length; p++) {
            perPeer[p] = TokenPermutation.sum(chunks[p], 0, chunks[p].length);
        }
        NDArray gathered = ExpertCommunication.unevenAllGather(scope, expertTp, received, perPeer);

        ChunkOrder order = ChunkOrder.byLocalExpert(chunks, numLocalExperts);
        NDArray expertInput = order.isIdentity() ? gathered : TokenPermutation.rows(gathered, m.create(order.sorted), m);
        long[] perExpert = order.rowsPerExpert;
        int slots = Math.min(topK, numExperts);
        return new Rows(expertInput, perExpert, (s, expertOutput) -> {
            NDManager sm = s.manager();
            NDArray unsorted = order.isIdentity() ? expertOutput
                    : TokenPermutation.rows(expertOutput, sm.create(order.inverse), sm);
            NDArray own = ExpertCommunication.unevenReduceScatter(s, expertTp, unsorted, perPeer);
            NDArray back = ExpertCommunication.allToAll(s, ep, own, recv, send);
            return permutation.combine(back, routing.keptMap(), routing.probs(), slots, s);
        });
    }

    /** Every rank's {@code values} (same length on all), in rank order; one all-gather of longs. */
    private static long[][] gatherCounts(Communicator group, long[] values, NDManager owner) {
        if (group.size() == 1) {
            return new long[][] {values.clone()};
        }
        NDArray local = owner.create(values, new Shape(1, values.length));
        long[] all = group.allGather(local, 0, owner).toLongArray();
        long[][] out = new long[group.size()][values.length];
        for (int r = 0; r < out.length; r++) {
            System.arraycopy(all, r * values.length, out[r], 0, values.length);
        }
        return out;
    }

    /**
     * The reordering of gathered rows from chunk order (expert-TP peer, source EP rank, local expert)
     * to local-expert order (local expert, peer, source), as row indices.
     */
    private static final class ChunkOrder {
        final long[] sorted;
        final long[] inverse;
        final long[] rowsPerExpert;

        private ChunkOrder(long[] sorted, long[] inverse, long[] rowsPerExpert) {
            this.sorted = sorted;
            this.inverse = inverse;
            this.rowsPerExpert = rowsPerExpert;
        }

        static ChunkOrder byLocalExpert(long[][] chunks, int numLocalExperts) {
            int peers = chunks.length;
            int sources = chunks[0].length / numLocalExperts;
            long[][] start = new long[peers][chunks[0].length];
            long total = 0;
            for (int p = 0; p < peers; p++) {
                for (int c = 0; c < chunks[p].length; c++) {
                    start[p][c] = total;
                    total += chunks[p][c];
                }
            }
            long[] sorted = new long[Math.toIntExact(total)];
            long[] inverse = new long[sorted.length];
            long[] perExpert = new long[numLocalExperts];
            int next = 0;
            for (int l = 0; l < numLocalExperts; l++) {
                for (int p = 0; p < peers; p++) {
                    for (int i = 0; i < sources; i++) {
                        int c = i * numLocalExperts + l;
                        for (long r = 0; r < chunks[p][c]; r++) {
                            long row = start[p][c] + r;
                            sorted[next] = row;
                            inverse[(int) row] = next;
                            next++;
                        }
                        perExpert[l] += chunks[p][c];
                    }
                }
            }
            return new ChunkOrder(sorted, inverse, perExpert);
        }

        boolean isIdentity() {
            for (int j = 0; j < sorted.length; j++) {
                if (sorted[j] != j) {
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
