package io.mcore4j.moe;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.Tensors;

/**
 * Expert capacity as Megatron-Core applies it ({@code apply_router_token_dropping}): which (token, expert)
 * pairs each expert keeps, and with {@code --moe-pad-expert-input-to-capacity} which unrouted tokens pad it to
 * exactly its capacity. Works on {@code [T, E]} maps; no gradients flow through the masks (the probabilities
 * are masked by the caller).
 *
 * <p>The choice is libtorch's {@code topk(..., k = capacity, dim = 0, sorted = false)} over each expert's
 * column, as in Megatron: of the probabilities (drop policy {@code probs}) or of the 0/1 routing map
 * ({@code position}). Among equal values, and so among all routed tokens of the position policy and the
 * padding tokens of both policies, the tokens chosen are the ones libtorch's top-k returns; they are not
 * simply the earliest. Running the same libtorch call keeps the choice identical to Megatron's.
 */
public final class TokenDropping {
    private TokenDropping() {}

    /**
     * Tokens an expert may hold: Megatron's {@code get_capacity(T * k, E, factor)}, i.e.
     * {@code ceil(T * k / E * factor)}, capped at {@code T} (an expert never holds more than every token;
     * Megatron keeps every token then as well).
     *
     * @param tokens local tokens T, at least 1
     * @param topK experts per token
     * @param experts number of experts
     * @param factor capacity factor, > 0
     * @return the capacity, in {@code [1, T]}
     */
    public static long capacity(long tokens, int topK, int experts, double factor) {
        long c = (long) Math.ceil((double) tokens * topK / experts * factor);
        return Math.max(1, Math.min(c, tokens));
    }

    /**
     * The capacity mask: per expert, the {@code capacity} tokens libtorch's unsorted top-k picks by the
     * policy's key. The kept pairs are {@code routingMap ∧ mask}; with padding the dispatched pairs are the
     * mask itself, exactly {@code capacity} tokens per expert.
     *
     * @param probs {@code [T, E]} routing probabilities, 0 off the routing map (values only are read; the
     *              dtype is the router's, as in Megatron, since it decides ties)
     * @param routingMap {@code [T, E]} 0/1 top-k map
     * @param capacity tokens per expert, from {@link #capacity}
     * @param policy which key the top-k ranks
     * @param owner owner of the result and temporaries
     * @return {@code [T, E]} float32 0/1 with {@code min(capacity, T)} ones per column
     */
    public static NDArray capacityMask(NDArray probs, NDArray routingMap, long capacity, MoeConfig.DropPolicy policy,
                                       NDManager owner) {
        long tokens = routingMap.getShape().get(0);
        if (capacity >= tokens) {
            return owner.ones(routingMap.getShape(), DataType.FLOAT32);
        }
        NDArray key = Tensors.own(policy == MoeConfig.DropPolicy.PROBS
                ? probs.stopGradient()
                : routingMap.toType(DataType.INT32, false), owner);
        NDList top = key.topK((int) capacity, 0, true, false);
        top.attach(owner);
        NDArray rows = top.get(1);
        return Tensors.own(owner.zeros(routingMap.getShape(), DataType.FLOAT32)
                .scatter(rows, owner.ones(rows.getShape(), DataType.FLOAT32), 0), owner);
    }
}
