package io.mcore4j.moe;

import io.mcore4j.core.autograd.Cast;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDArrays;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.index.NDIndex;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;

/**
 * The (token, expert) pairs of a {@code [T, E']} 0/1 routing map in expert-major order (all pairs of
 * expert 0 by increasing token, then expert 1, ...), which is the order experts receive their rows.
 * {@link #permute} gathers the tokens into that order; {@link #combine} is its weighted inverse,
 * summing each token's kept expert outputs times their probabilities. Both are differentiable and
 * communication-free.
 *
 * <p>Two implementations compute the same function, chosen in {@link #of}: {@link Composed} from DJL's
 * index ops, and {@link FusedTokenPermutation}, one TorchScript call each way (Megatron-Core's
 * {@code --moe-permute-fusion}).
 */
abstract sealed class TokenPermutation permits TokenPermutation.Composed, FusedTokenPermutation {
    /** The {@code [T, E']} 0/1 map whose pairs these are. */
    final NDArray routingMap;
    private final long[] tokensPerExpert;

    TokenPermutation(NDArray routingMap, NDManager owner, long[] counts) {
        this.routingMap = routingMap;
        this.tokensPerExpert = counts != null ? counts.clone() : toLongs(Tensors.own(routingMap.sum(new int[] {0}), owner));
    }

    /**
     * The pairs of {@code routingMap}.
     *
     * @param routingMap {@code [T, E']} 0/1 (float)
     * @param owner owner of the index tensors
     * @param fused one TorchScript call each way instead of composed index ops
     * @return the permutation
     */
    static TokenPermutation of(NDArray routingMap, NDManager owner, boolean fused) {
        return of(routingMap, owner, fused, null);
    }

    /**
     * The pairs of {@code routingMap}, whose column sums the caller already read (a dispatcher that reads them
     * with the other ranks' counts, in one device-to-host copy).
     *
     * @param routingMap {@code [T, E']} 0/1 (float)
     * @param owner owner of the index tensors
     * @param fused one TorchScript call each way instead of composed index ops
     * @param counts the map's column sums, or null to read them here
     * @return the permutation
     */
    static TokenPermutation of(NDArray routingMap, NDManager owner, boolean fused, long[] counts) {
        return of(routingMap, owner, fused, counts, 0);
    }

    /**
     * The pairs of {@code routingMap}, whose column sums the caller already read, and where every token has the same
     * number of pairs (dropless top-k routing), which the fused permutation uses to combine by gathers alone.
     *
     * @param routingMap {@code [T, E']} 0/1 (float)
     * @param owner owner of the index tensors
     * @param fused one TorchScript call each way instead of composed index ops
     * @param counts the map's column sums, or null to read them here
     * @param pairsPerToken the pairs of every token (every row of the map has that many ones), or 0 when rows may
     *                      differ (a capacity dropped pairs or padded experts)
     * @return the permutation
     * @throws IllegalArgumentException if the counts do not sum to {@code T × pairsPerToken}
     */
    static TokenPermutation of(NDArray routingMap, NDManager owner, boolean fused, long[] counts, int pairsPerToken) {
        return of(routingMap, owner, fused, counts, pairsPerToken, null);
    }

    /**
     * {@link #of(NDArray, NDManager, boolean, long[], int)} where the router's top-k indices are at hand: the fused
     * permutation of dropless routing lists the pairs from them ({@code pair_combine.pt}'s {@code permute_pairs}).
     *
     * @param routingMap {@code [T, E']} 0/1 (float)
     * @param owner owner of the index tensors
     * @param fused one TorchScript call each way instead of composed index ops
     * @param counts the map's column sums, or null to read them here
     * @param pairsPerToken the pairs of every token, or 0 when rows may differ
     * @param indices {@code [T, pairsPerToken]} int64, the columns of the map's ones (any order), or null
     * @return the permutation
     * @throws IllegalArgumentException if the counts do not sum to {@code T × pairsPerToken}
     */
    static TokenPermutation of(NDArray routingMap, NDManager owner, boolean fused, long[] counts, int pairsPerToken,
                               NDArray indices) {
        return fused ? new FusedTokenPermutation(routingMap, owner, counts, pairsPerToken, indices)
                : new Composed(routingMap, owner, counts);
    }

    /** @return rows each expert receives, in expert order (a copy) */
    long[] tokensPerExpert() {
        return tokensPerExpert.clone();
    }

    /**
     * Gathers the tokens of every pair, in pair order.
     *
     * @param tokens {@code [T, h]}
     * @param owner owner of the result
     * @return {@code [N, h]}
     */
    abstract NDArray permute(NDArray tokens, NDManager owner);

    /**
     * {@code out[t] = Σ_e probs[t, e] · expertOutput[pair (t, e)]} over the kept pairs of each token.
     * Pairs that are dispatched but not kept (capacity padding) contribute nothing: their weight is 0.
     *
     * @param expertOutput {@code [N, h]} rows in pair order
     * @param keptMap {@code [T, E']} 0/1, a subset of the routing map with at most {@code slots} ones per row
     * @param probs {@code [T, E']} probabilities (gradients flow to them)
     * @param slots the most kept pairs a token can have, {@code min(k, E')}
     * @param scope the pass's scope; owns the result
     * @return {@code [T, h]} in {@code expertOutput}'s dtype (the weighted sum runs in the promoted
     *         dtype of outputs and probabilities, as Megatron-Core's unpermute does)
     */
    abstract NDArray combine(NDArray expertOutput, NDArray keptMap, NDArray probs, int slots, AutogradScope scope);

    /**
     * From DJL's ops: index-select and gather, whose backward libtorch computes by scatter-add. The order is
     * deterministic: pairs come from {@code nonzero} of the transposed map, which lists them in row-major order.
     */
    static final class Composed extends TokenPermutation {
        private final NDArray tokenIndices;

        Composed(NDArray routingMap, NDManager owner, long[] counts) {
            super(routingMap, owner, counts);
            NDArray pairs = Tensors.own(routingMap.transpose().nonzero(), owner); // [N, 2]: (expert, token)
            this.tokenIndices = Tensors.own(pairs.get(new NDIndex().addAllDim().addIndices(1)), owner);
        }

        @Override
        NDArray permute(NDArray tokens, NDManager owner) {
            return rows(tokens, tokenIndices, owner);
        }

        @Override
        NDArray combine(NDArray expertOutput, NDArray keptMap, NDArray probs, int slots, AutogradScope scope) {
            NDManager owner = scope.manager();
            long tokens = routingMap.getShape().get(0);
            long pairs = tokenIndices.getShape().get(0);
            long hidden = expertOutput.getShape().get(1);
            long[] counts = tokensPerExpert();
            // position of pair (t, e) in pair order: start of expert e plus the rank of t among e's tokens
            long[] starts = new long[counts.length];
            for (int e = 1; e < starts.length; e++) {
                starts[e] = starts[e - 1] + counts[e - 1];
            }
            NDArray startTensor = owner.create(starts);
            NDArray rank = Tensors.own(routingMap.toType(DataType.INT64, false).cumSum(0).sub(1), owner);
            NDArray position = Tensors.own(rank.add(startTensor), owner);
            // each token's kept experts (unused slots pick a column whose kept flag is 0)
            NDArray slotExperts = Tensors.own(keptMap.topK(slots, 1, true, false).get(1), owner);
            NDArray valid = Tensors.own(keptMap.gather(slotExperts, 1), owner);
            NDArray slotPosition = Tensors.own(position.gather(slotExperts, 1), owner);
            // invalid slots read an appended zero row
            NDArray validRow = Tensors.own(valid.toType(DataType.INT64, false), owner);
            NDArray rows = Tensors.own(slotPosition.mul(validRow).add(validRow.neg().add(1).mul(pairs)), owner);
            NDArray withZeroRow = Tensors.own(NDArrays.concat(new NDList(expertOutput,
                    DataTypes.zeros(owner, new Shape(1, hidden), DataTypes.of(expertOutput))), 0), owner);
            NDArray picked = rows(withZeroRow, rows.reshape(-1), owner).reshape(tokens, slots, hidden);
            NDArray weights = Tensors.own(probs.gather(slotExperts, 1).mul(DataTypes.toType(valid, DataTypes.of(probs), false)), owner);
            NDArray weighted = Tensors.own(picked.mul(weights.expandDims(2)), owner);
            return Cast.apply(scope, Tensors.own(weighted.sum(new int[] {1}), owner), DataTypes.of(expertOutput));
        }
    }

    /** Rows {@code rows} (int64 indices) of {@code x}, differentiable (index-select), owned by {@code owner}. */
    static NDArray rows(NDArray x, NDArray rows, NDManager owner) {
        return Tensors.own(x.get(new NDIndex("{}", rows)), owner);
    }

    /** A host copy of an integer or floating tensor's values as longs (rounded). */
    static long[] toLongs(NDArray x) {
        if (x.getDataType() == DataType.INT64) {
            return x.toLongArray();
        }
        try (NDManager temp = x.getManager().newSubManager()) {
            NDArray asLong = Tensors.own(x.round().toType(DataType.INT64, false), temp);
            return asLong.toLongArray();
        }
    }

    /** Sum of {@code counts[from, to)}. */
    static long sum(long[] counts, int from, int to) {
        long s = 0;
        for (int i = from; i < to; i++) {
            s += counts[i];
        }
        return s;
    }
}
