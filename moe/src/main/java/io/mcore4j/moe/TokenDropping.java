package io.mcore4j.moe;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.Tensors;

/**
 * Expert capacity: how many of the tokens routed to an expert it keeps, and the padding that gives
 * every expert exactly its capacity. Works on {@code [T, E]} float32 0/1 maps; no gradients flow
 * through the masks (the probabilities are masked by the caller).
 */
final class TokenDropping {
    private TokenDropping() {}

    /**
     * {@code min(ceil(T * k / E * factor), T)} (Megatron-Core's {@code get_capacity} on the {@code T * k}
     * routed pairs; an expert never holds more than every token).
     *
     * @param tokens local tokens T, at least 1
     * @param topK experts per token
     * @param experts number of experts
     * @param factor capacity factor, > 0
     * @return the capacity, in {@code [1, T]}
     */
    static long capacity(long tokens, int topK, int experts, double factor) {
        long c = (long) Math.ceil((double) tokens * topK / experts * factor);
        return Math.max(1, Math.min(c, tokens));
    }

    /**
     * The selected pairs each expert keeps: at most {@code capacity} per expert, chosen by
     * probability (highest first) or by position (earliest first).
     *
     * @param selected {@code [T, E]} 0/1 top-k map
     * @param probs {@code [T, E]} probabilities of the selected pairs (values only are read)
     * @param capacity tokens per expert
     * @param policy which tokens to keep
     * @param owner owner of the result and temporaries
     * @return {@code [T, E]} 0/1, a subset of {@code selected}
     */
    static NDArray keep(NDArray selected, NDArray probs, long capacity, MoeConfig.DropPolicy policy, NDManager owner) {
        long tokens = selected.getShape().get(0);
        if (capacity >= tokens) {
            return selected;
        }
        if (policy == MoeConfig.DropPolicy.POSITION) {
            // 1-based rank of each selected token among the expert's selected tokens, in token order
            NDArray rank = Tensors.own(selected.cumSum(0), owner);
            return Tensors.own(rank.lte(capacity).toType(DataType.FLOAT32, false).mul(selected), owner);
        }
        // probabilities lie in [0, 1]: unselected pairs get -1 and are chosen last
        NDArray key = Tensors.own(probs.stopGradient().toType(DataType.FLOAT32, false).add(1).mul(selected).sub(1), owner);
        NDArray top = Tensors.own(key.topK((int) capacity, 0, true, false).get(1), owner);
        NDArray chosen = Tensors.own(owner.zeros(selected.getShape()).scatter(top,
                owner.ones(top.getShape()), 0), owner);
        return Tensors.own(chosen.mul(selected), owner);
    }

    /**
     * Adds to {@code kept} the earliest tokens not kept by each expert until it holds exactly
     * {@code capacity} tokens.
     *
     * @param kept {@code [T, E]} 0/1 with at most {@code capacity} ones per column
     * @param capacity tokens per expert, at most T
     * @param owner owner of the result
     * @return {@code [T, E]} 0/1 with exactly {@code capacity} ones per column, a superset of {@code kept}
     */
    static NDArray padToCapacity(NDArray kept, long capacity, NDManager owner) {
        NDArray missing = Tensors.own(kept.sum(new int[] {0}, true).neg().add(capacity), owner);
        NDArray free = Tensors.own(kept.neg().add(1), owner);
        NDArray freeRank = Tensors.own(free.cumSum(0), owner);
        NDArray padding = Tensors.own(freeRank.lte(missing).toType(DataType.FLOAT32, false).mul(free), owner);
        return Tensors.own(kept.add(padding), owner);
    }
}
