package io.mcore4j.moe;

import ai.djl.ndarray.NDArray;

import java.util.Objects;

/**
 * The router's decision for one micro-batch of {@code T} local tokens over {@code E} experts. All
 * tensors are owned by the pass's scope.
 *
 * @param probs {@code [T, E]} routing weight of each kept (token, expert) pair, 0 elsewhere; carries
 *              the gradient to the router (and the attached auxiliary losses)
 * @param routingMap {@code [T, E]} float32 0/1: the pairs dispatched to experts, i.e. the kept pairs
 *                   plus, with {@code padToCapacity}, unrouted padding pairs (weight 0) so that every
 *                   expert receives exactly {@code capacity} tokens
 * @param keptMap {@code [T, E]} float32 0/1: the selected pairs that survived the capacity limit, at
 *                most {@code topK} per token; the pairs whose outputs are combined
 * @param topK experts selected per token
 * @param capacity tokens per expert allowed on this rank, or -1 without a capacity
 * @param indices {@code [T, topK]} int64: each token's experts, the ones of {@code routingMap}, where the router
 *                gives them (dropless routing); else null
 * @param padded whether {@code routingMap} pads every expert to exactly its capacity (Megatron's
 *               {@code --moe-pad-expert-input-to-capacity}): its column sums are then known without reading them
 *               ({@link #rowsPerExpert()})
 */
public record Routing(NDArray probs, NDArray routingMap, NDArray keptMap, int topK, long capacity, NDArray indices,
                      boolean padded) {

    /** Checks that the tensors are present. */
    public Routing {
        Objects.requireNonNull(probs, "probs");
        Objects.requireNonNull(routingMap, "routingMap");
        Objects.requireNonNull(keptMap, "keptMap");
        if (padded && capacity < 1) {
            throw new IllegalArgumentException("a routing padded to capacity needs a capacity of at least 1, not "
                    + capacity);
        }
    }

    /** A routing that does not pad its experts to capacity. */
    public Routing(NDArray probs, NDArray routingMap, NDArray keptMap, int topK, long capacity, NDArray indices) {
        this(probs, routingMap, keptMap, topK, capacity, indices, false);
    }

    /** A routing without its experts' indices. */
    public Routing(NDArray probs, NDArray routingMap, NDArray keptMap, int topK, long capacity) {
        this(probs, routingMap, keptMap, topK, capacity, null, false);
    }

    /**
     * The pairs {@code routingMap} dispatches to each expert when it pads them to capacity: {@code min(capacity, T)}
     * for every expert, whatever the routing, so a dispatcher sizes its exchanges without reading the map's column
     * sums on the host (which waits for the device, and which a CUDA graph cannot hold).
     *
     * @return rows per expert, or -1 when the routing does not pad ({@link #padded()} is false)
     */
    public long rowsPerExpert() {
        return padded ? Math.min(capacity, numTokens()) : -1;
    }

    /** @return number of local tokens T */
    public long numTokens() {
        return probs.getShape().get(0);
    }

    /** @return number of experts E */
    public int numExperts() {
        return (int) probs.getShape().get(1);
    }
}
