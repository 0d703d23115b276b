package io.mcore4j.moe;

import ai.djl.Device;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.TorchScriptModule;
import io.mcore4j.core.TorchScriptModules;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.autograd.Function;
import io.mcore4j.core.autograd.FunctionContext;
import io.mcore4j.core.autograd.NoGrad;

/**
 * The token permutation in one call each way (Megatron-Core's {@code --moe-permute-fusion}), through mcore4j's
 * TorchScript archives {@code permute_tokens.pt} (the map's pairs by {@code nonzero_static}, one index-select) and
 * {@code unpermute_tokens.pt} (the kept pairs' probabilities picked by the pairs' indices, one multiply, one
 * index-add), written by {@code scripts/make_token_permutation_modules.py}. Neither waits for the device: the number
 * of pairs, which a masked select or a plain {@code nonzero} would copy to the host first, is the sum of the counts
 * the caller already read, handed to the module as a host scalar. Differentiable in the tokens, the expert outputs
 * and the probabilities; the pairs come in the same expert-major order as {@link TokenPermutation.Composed}'s, and
 * the sums differ from its only by the order of addition.
 *
 * <p>Where every token has the same number k of pairs (dropless routing), the way back needs no index-add, whose
 * kernel adds element by element with atomics: {@code pair_combine.pt} ({@code scripts/make_pair_combine_module.py})
 * permutes and lists each token's k rows in one call per pass, and the combine (a Function: a batched product of each
 * token's k weights with its gathered rows; backward by gathers) and the permutation's transpose (each token's
 * gathered rows summed) gather rows instead. The same sums in the same promoted dtype, in another order of addition.
 */
final class FusedTokenPermutation extends TokenPermutation {
    private static final String PERMUTE = "/io/mcore4j/moe/permute_tokens.pt";
    private static final String UNPERMUTE = "/io/mcore4j/moe/unpermute_tokens.pt";

    private final int pairsPerToken;
    private NDArray tokenOfRow;
    private NDArray expertOfRow;
    /** With {@link #pairsPerToken}: each token's rows {@code [T, k]}, each row's pair {@code [N]}, each pair's expert */
    private NDArray rowOfPair;
    private NDArray pairOfRow;
    private NDArray expertOfPair;

    /** The outputs of a permutation run {@link #ahead}, which {@link #permute} hands out once; else null. */
    private NDList aheadOutputs;
    /** With {@link #pairsPerToken}: each token's experts {@code [T, k]} (the router's top-k indices), or null. */
    private final NDArray indices;

    FusedTokenPermutation(NDArray routingMap, NDManager owner, long[] counts, int pairsPerToken, NDArray indices) {
        this(routingMap, owner, counts, pairsPerToken, null, indices);
    }

    private FusedTokenPermutation(NDArray routingMap, NDManager owner, long[] counts, int pairsPerToken,
                                  NDList aheadOutputs, NDArray indices) {
        super(routingMap, owner, counts);
        this.aheadOutputs = aheadOutputs;
        this.indices = indices;
        long tokens = routingMap.getShape().get(0);
        long[] perExpert = tokensPerExpert();
        long pairs = sum(perExpert, 0, perExpert.length);
        if (pairsPerToken < 0 || pairsPerToken > 0 && pairs != tokens * pairsPerToken) {
            throw new IllegalArgumentException(pairs + " pairs of " + tokens + " tokens are not " + pairsPerToken
                    + " per token");
        }
        // no tokens: nothing to gather, the general way handles the empty map
        this.pairsPerToken = tokens > 0 ? pairsPerToken : 0;
    }

    /**
     * {@inheritDoc} Call once before {@link #combine}, which reuses the token of each row found here.
     */
    @Override
    NDArray permute(NDArray tokens, NDManager owner) {
        return permute(tokens, owner, owner);
    }

    /**
     * {@link #permute} with the rows owned by {@code rowsOwner} and the token of each row (which {@link #combine}
     * reuses) by {@code indexOwner}.
     */
    NDArray permute(NDArray tokens, NDManager indexOwner, NDManager rowsOwner) {
        NDList out;
        if (aheadOutputs != null) {
            out = aheadOutputs;
            aheadOutputs = null;
        } else if (pairsPerToken > 0 && indices != null) {
            // from the router's top-k indices: two sorts, no nonzero over the map
            out = PairCombine.MODULE.forward(PairCombine.PERMUTE_PAIRS, tokens, indices, routingMap);
        } else {
            long[] counts = tokensPerExpert();
            // with k pairs per token, pair_combine.pt permutes and lists each token's rows in the same call
            out = run(pairsPerToken > 0 ? PairCombine.MODULE
                    : TorchScriptModules.shared(FusedTokenPermutation.class, PERMUTE), tokens, routingMap,
                    sum(counts, 0, counts.length), indexOwner);
        }
        out.attach(indexOwner);
        out.get(0).attach(rowsOwner);
        tokenOfRow = out.get(1);
        expertOfRow = out.get(2);
        if (pairsPerToken > 0) {
            rowOfPair = out.get(3);
            pairOfRow = out.get(4);
            expertOfPair = out.get(5);
        }
        return out.get(0);
    }

    /**
     * Runs the permutation of dropless routing before the routing map's column sums reach the host (the pairs are
     * {@code T × pairsPerToken} whatever the counts), with grad off, so that the device permutes while the host waits
     * for the counts. {@link Ahead#permutation} then makes the permutation, whose first {@link #permute} of these
     * same tokens returns these rows.
     *
     * @param tokens {@code [T, h]}, the tokens the permutation will be asked to permute
     * @param routingMap {@code [T, E']} 0/1 with {@code pairsPerToken} ones in every row
     * @param indices {@code [T, pairsPerToken]} int64, the columns of the map's ones in any order (the router's top-k
     *                indices), from which the pairs are listed by two sorts instead of a {@code nonzero_static} over
     *                the map and a sort of the rows by token, and the map's column sums made in the same call
     *                ({@link Ahead#counts()}); or null
     * @param pairsPerToken k, above 0
     * @param owner owns the outputs until {@link #permute} takes them
     * @return the outputs, waiting for the counts
     */
    static Ahead ahead(NDArray tokens, NDArray routingMap, NDArray indices, int pairsPerToken, NDManager owner) {
        NDList out;
        try (NoGrad ignored = NoGrad.enter()) {
            out = indices != null ? PairCombine.MODULE.forward(PairCombine.PERMUTE_PAIRS, tokens, indices, routingMap)
                    : run(PairCombine.MODULE, tokens, routingMap, routingMap.getShape().get(0) * pairsPerToken, owner);
        }
        out.attach(owner);
        return new Ahead(routingMap, owner, pairsPerToken, out);
    }

    /**
     * One permutation module's call: {@code module(tokens, routingMap, pairs)} with the pair count as a host scalar.
     *
     * @param module {@code permute_tokens.pt} or {@code pair_combine.pt}
     * @param tokens {@code [T, h]}
     * @param routingMap {@code [T, E']} 0/1
     * @param pairs the map's ones
     * @param hostParent parent of the scalar's short-lived manager
     * @return the module's outputs, owned by the tokens' manager
     */
    private static NDList run(TorchScriptModule module, NDArray tokens, NDArray routingMap, long pairs,
                              NDManager hostParent) {
        try (NDManager host = hostParent.newSubManager(Device.cpu())) {
            return module.forward(new NDList(tokens, routingMap, host.create(pairs)));
        }
    }

    /**
     * A permutation run {@link #ahead} of the counts.
     *
     * @param routingMap the map permuted
     * @param owner owner of the index tensors
     * @param pairsPerToken k
     * @param outputs the module's outputs
     */
    record Ahead(NDArray routingMap, NDManager owner, int pairsPerToken, NDList outputs) {
        /**
         * @param counts the map's column sums, now on the host
         * @return the permutation that hands out these outputs
         */
        FusedTokenPermutation permutation(long[] counts) {
            return new FusedTokenPermutation(routingMap, owner, counts, pairsPerToken, outputs, null);
        }

        /**
         * @return the map's column sums {@code [1, E]} int64 on the device where the call made them (from the
         *     indices), else null
         */
        NDArray counts() {
            return outputs.size() > 6 ? outputs.get(6) : null;
        }
    }

    /**
     * The transpose of {@link #permute}: each token's rows summed ({@code out[t] = Σ_e rows[pair (t, e)]}, in
     * float32 for a lower-precision dtype), by the unpermute module with the routing map as weights. Call after
     * {@link #permute}.
     *
     * @param rows {@code [N, h]} in pair order
     * @return {@code [T, h]} in the rows' dtype, owned by the rows' manager
     */
    NDArray sumRowsPerToken(NDArray rows) {
        if (tokenOfRow == null) {
            throw new IllegalStateException("the rows' tokens are found by permute");
        }
        if (rowOfPair != null) {
            NDArray out = PairCombine.MODULE.forward(PairCombine.SUM_ROWS, rows, rowOfPair).singletonOrThrow();
            out.attach(rows.getManager());
            return out;
        }
        TorchScriptModule module = TorchScriptModules.shared(FusedTokenPermutation.class, UNPERMUTE);
        NDArray out = module.forward(new NDList(rows, tokenOfRow, expertOfRow, routingMap, routingMap)).singletonOrThrow();
        out.attach(rows.getManager());
        return out;
    }

    @Override
    NDArray combine(NDArray expertOutput, NDArray keptMap, NDArray probs, int slots, AutogradScope scope) {
        if (tokenOfRow == null) {
            throw new IllegalStateException("combine before permute: the rows' tokens are found by permute");
        }
        if (rowOfPair != null) {
            return combine(expertOutput, probs, null, scope);
        }
        TorchScriptModule module = TorchScriptModules.shared(FusedTokenPermutation.class, UNPERMUTE);
        return Tensors.own(module.forward(new NDList(expertOutput, tokenOfRow, expertOfRow, keptMap, probs))
                .singletonOrThrow(), scope.manager());
    }

    /**
     * @return whether every token has the same number of pairs, so that the combine gathers
     *     ({@link #combine(NDArray, NDArray, RowsExchange, AutogradScope)})
     */
    boolean combinesByGathers() {
        return pairsPerToken > 0;
    }

    /**
     * {@link #combine(NDArray, NDArray, NDArray, int, AutogradScope)} by gathers, with the rows first brought into
     * pair order by {@code exchange} (the all-to-all back from the experts) inside the same Function, whose backward
     * sends the rows' gradient out by it: one autograd node for both. Call after {@link #permute}. Every token has its
     * k pairs (dropless routing), so every pair is kept: no kept map.
     *
     * @param expertOutput the experts' rows, which {@code exchange} brings back into pair order; or, without one,
     *                     {@code [N, h]} in pair order
     * @param probs {@code [T, E']} probabilities (gradients flow to them)
     * @param exchange the way back and its transpose, or null for none
     * @param scope the pass's scope; owns the result
     * @return {@code [T, h]} in the rows' dtype
     * @throws IllegalStateException before {@link #permute}, or where tokens have different numbers of pairs
     */
    NDArray combine(NDArray expertOutput, NDArray probs, RowsExchange exchange, AutogradScope scope) {
        if (rowOfPair == null) {
            throw new IllegalStateException(tokenOfRow == null ? "combine before permute: the rows' tokens are found by"
                    + " permute" : "a combine by gathers needs the same number of pairs for every token");
        }
        // the index tensors are inputs too, so that the scope keeps them for the backward in any frame
        return scope.apply1(exchange == null ? PairCombine.LOCAL : new PairCombine(exchange), expertOutput, probs,
                tokenOfRow, rowOfPair, pairOfRow, expertOfPair);
    }

    /** How the experts' rows come back into pair order before a combine, and their gradient goes out after it. */
    interface RowsExchange {
        /**
         * @param expertRows the experts' rows
         * @param owner owns the result
         * @return the rows in pair order
         */
        NDArray back(NDArray expertRows, NDManager owner);

        /**
         * @param pairRows a gradient of the rows in pair order
         * @param owner owns the result
         * @return the gradient of the experts' rows (the transpose of {@link #back})
         */
        NDArray forth(NDArray pairRows, NDManager owner);

        /** @return a short name for error messages */
        String name();
    }

    /**
     * {@code pair_combine.pt}'s methods, and the combine as a Function of the expert rows and the probabilities
     * (inputs: rows, probs, token of each row, row of each pair, pair of each row, expert of each pair),
     * with the rows first brought back by {@code exchange} where there is one (null: the rows are in pair order).
     */
    private record PairCombine(RowsExchange exchange) implements Function {
        static final TorchScriptModule MODULE = TorchScriptModules.shared(FusedTokenPermutation.class,
                "/io/mcore4j/moe/pair_combine.pt");
        private static final NDManager MARKERS = Mcore4j.newRootManager().newSubManager(Device.cpu());
        static final NDArray COMBINE = marker("combine");
        static final NDArray COMBINE_BACKWARD = marker("combine_backward");
        static final NDArray SUM_ROWS = marker("sum_rows");
        static final NDArray PERMUTE_PAIRS = marker("permute_pairs");
        static final PairCombine LOCAL = new PairCombine(null);

        /** A tensor named for an exported method, by which DJL picks it (kept for the process). */
        private static NDArray marker(String method) {
            return TorchScriptModules.methodMarker(MARKERS, method);
        }

        @Override
        public NDArray[] forward(FunctionContext ctx, NDArray... in) {
            NDArray[] saved = in.clone();
            if (exchange != null) {
                saved[0] = exchange.back(in[0], ctx.manager()); // the rows in pair order, which the backward reads
            }
            ctx.saveForBackward(saved);
            NDArray out = MODULE.forward(COMBINE, saved[0], in[3], in[5], in[1]).singletonOrThrow();
            out.attach(ctx.manager());
            return new NDArray[] {out};
        }

        @Override
        public NDArray[] backward(FunctionContext ctx, NDArray... grads) {
            NDList d = MODULE.forward(COMBINE_BACKWARD, ctx.saved(0), ctx.saved(2), ctx.saved(3), ctx.saved(4),
                    ctx.saved(5), ctx.saved(1), grads[0]);
            d.attach(ctx.manager());
            // with an exchange its transpose runs whether or not the rows need a gradient: collectives stay matched
            NDArray rows = exchange == null ? d.get(0) : exchange.forth(d.get(0), ctx.manager());
            return new NDArray[] {ctx.needsInputGrad(0) ? rows : null, ctx.needsInputGrad(1) ? d.get(1) : null,
                    null, null, null, null};
        }

        @Override
        public String name() {
            return exchange == null ? "moe-pair-combine" : "moe-pair-combine-after(" + exchange.name() + ")";
        }
    }
}
