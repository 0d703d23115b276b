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
 */
public record Routing(NDArray probs, NDArray routingMap, NDArray keptMap, int topK, long capacity, NDArray indices) {

    /** Checks that the tensors are present. */
    public Routing {
        Objects.requireNonNull(probs, "probs");
        Objects.requireNonNull(routingMap, "routingMap");
        Objects.requireNonNull(keptMap, "keptMap");
    }

    /** A routing without its experts' indices. */
    public Routing(NDArray probs, NDArray routingMap, NDArray keptMap, int topK, long capacity) {
        this(probs, routingMap, keptMap, topK, capacity, null);
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
