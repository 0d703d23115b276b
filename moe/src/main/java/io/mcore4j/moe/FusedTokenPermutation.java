package io.mcore4j.moe;

import ai.djl.Device;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.TorchScriptModule;
import io.mcore4j.core.TorchScriptModules;
import io.mcore4j.core.autograd.AutogradScope;

/**
 * The token permutation in one call each way (Megatron-Core's {@code --moe-permute-fusion}), through mcore4j's
 * TorchScript archives {@code permute_tokens.pt} (the map's pairs by {@code nonzero_static}, one index-select) and
 * {@code unpermute_tokens.pt} (the kept pairs' probabilities picked by the pairs' indices, one multiply, one
 * index-add), written by {@code scripts/make_token_permutation_modules.py}. Neither waits for the device: the number
 * of pairs, which a masked select or a plain {@code nonzero} would copy to the host first, is the sum of the counts
 * the caller already read, handed to the module as a host scalar. Differentiable in the tokens, the expert outputs
 * and the probabilities; the pairs come in the same expert-major order as {@link TokenPermutation.Composed}'s, and
 * the sums differ from its only by the order of addition.
 */
final class FusedTokenPermutation extends TokenPermutation {
    private static final String PERMUTE = "/io/mcore4j/moe/permute_tokens.pt";
    private static final String UNPERMUTE = "/io/mcore4j/moe/unpermute_tokens.pt";

    private NDArray tokenOfRow;
    private NDArray expertOfRow;

    FusedTokenPermutation(NDArray routingMap, NDManager owner, long[] counts) {
        super(routingMap, owner, counts);
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
        try (NDManager host = indexOwner.newSubManager(Device.cpu())) {
            long[] counts = tokensPerExpert();
            NDArray pairs = host.create(sum(counts, 0, counts.length));
            out = TorchScriptModules.shared(FusedTokenPermutation.class, PERMUTE).forward(new NDList(tokens, routingMap,
                    pairs));
            out.get(0).attach(rowsOwner);
            out.get(1).attach(indexOwner);
            out.get(2).attach(indexOwner);
        }
        tokenOfRow = out.get(1);
        expertOfRow = out.get(2);
        return out.get(0);
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
        TorchScriptModule module = TorchScriptModules.shared(FusedTokenPermutation.class, UNPERMUTE);
        return Tensors.own(module.forward(new NDList(expertOutput, tokenOfRow, expertOfRow, keptMap, probs))
                .singletonOrThrow(), scope.manager());
    }
}
