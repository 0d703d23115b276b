package io.mcore4j.moe;

import io.mcore4j.core.Tensors;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import io.mcore4j.core.DataTypes;

/**
 * The auxiliary losses of the router, as differentiable scalars (recorded by libtorch autograd).
 *
 * <p>Switch-Transformer load balancing over {@code T} tokens (possibly spread over several ranks):
 * {@code coeff · E / (k · T²) · Σ_e (Σ_t p_te) · count_e}, where {@code p} are the scores over all
 * experts, {@code count_e} the number of tokens whose top-k contains expert {@code e} (a constant)
 * and the inner sum runs over this rank's tokens only. Summing the per-rank values over the ranks
 * that share the counts gives the loss of the whole token set, which is why each rank back-propagates
 * only its own part.
 */
public final class LoadBalancingLoss {
    private LoadBalancingLoss() {}

    /**
     * Megatron-Core's {@code switch_load_balancing_loss_func}.
     *
     * @param scores {@code [T_local, E']} scores (grad flows through them)
     * @param counts {@code [E']} token counts over the whole token set (constant)
     * @param totalTokens the size of the whole token set
     * @param topK experts per token
     * @param numExperts E (not E' when experts are folded with the batch)
     * @param coeff the coefficient
     * @param owner owner of the result
     * @return the scalar loss
     */
    public static NDArray switchLoss(NDArray scores, NDArray counts, double totalTokens, int topK, int numExperts,
                              double coeff, NDManager owner) {
        double factor = numExperts * coeff / (topK * totalTokens * totalTokens);
        NDArray perExpert = Tensors.own(scores.sum(new int[] {0}), owner);
        NDArray weighted = Tensors.own(perExpert.mul(DataTypes.toType(counts, DataTypes.of(perExpert), false)).sum(), owner);
        return Tensors.scale(weighted, factor, owner);
    }

    /**
     * ST-MoE's z-loss on this rank's tokens (Megatron-Core's {@code z_loss_func}): {@code coeff · mean_t (logsumexp_e logits_te)²}.
     *
     * @param logits {@code [T, E]}
     * @param coeff the coefficient (already divided by the number of ranks sharing a micro-batch)
     * @param owner owner of the result
     * @return the scalar loss
     */
    public static NDArray zLoss(NDArray logits, double coeff, NDManager owner) {
        NDArray lse = logSumExp(logits, owner);
        return Tensors.scale(Tensors.own(lse.mul(lse).mean(), owner), coeff, owner);
    }

    /** {@code log Σ exp(x)} over the last dim, stabilised by the (constant) row maximum. */
    private static NDArray logSumExp(NDArray x, NDManager owner) {
        int last = x.getShape().dimension() - 1;
        NDArray max = Tensors.own(x.max(new int[] {last}, true).stopGradient(), owner);
        return Tensors.own(x.sub(max).exp().sum(new int[] {last}).log().add(max.squeeze(last)), owner);
    }
}
