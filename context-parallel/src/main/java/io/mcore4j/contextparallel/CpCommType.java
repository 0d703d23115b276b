package io.mcore4j.contextparallel;

import java.util.Arrays;
import java.util.Locale;

/**
 * How attention exchanges keys and values across the context-parallel group: Megatron-Core's
 * {@code --cp-comm-type}. Each rank keeps its own queries (its {@link ContextParallelSplit} of the
 * sequence); what differs is how the other ranks' keys and values reach them.
 */
public enum CpCommType {
    /**
     * All-gather the keys and values of the whole sequence over the group, attend the local
     * queries to them under a causal mask of global positions; backward reduce-scatters the key
     * and value gradients. One collective per direction; holds the whole sequence's keys and
     * values (and a local-queries × whole-sequence score matrix) at once.
     */
    ALL_GATHER("allgather"),
    /**
     * Pass keys and values around the group as a ring, {@code CP} steps of point-to-point
     * exchange; each step attends the local queries to the block it holds, blocks wholly in the
     * future are skipped, and the partial results are merged by their log-sum-exp (online softmax).
     * Backward passes the key and value gradients back around the ring.
     */
    P2P("p2p"),
    /**
     * Megatron-Core's {@code a2a} (DeepSpeed-Ulysses): an all-to-all scatters the attention heads and
     * gathers the sequence, so each rank attends the whole sequence for {@code heads/CP} of its heads,
     * and a second all-to-all returns the outputs to their tokens; backward is the two all-to-alls
     * transposed. Needs the heads of a tensor-parallel rank divisible by {@code CP}; grouped keys and
     * values are repeated where their groups are not.
     */
    A2A("a2a"),
    /**
     * Megatron-Core's hierarchical {@code a2a+p2p} ({@code --hierarchical-context-parallel-sizes A B},
     * {@code A·B = CP}): an all-to-all inside each group of {@code A} consecutive context-parallel
     * ranks (the inner, typically intra-node group) scatters the heads and gathers that group's tokens,
     * then the keys and values of {@code heads/A} heads travel around a ring of {@code B} ranks (stride
     * {@code A}) as in {@link #P2P}, and a second all-to-all returns the outputs to their tokens.
     *
     * <p>Why the ring needs nothing new: the inner group {@code g} holds chunks {@code gA … gA+A−1} and
     * {@code 2N−A−gA … 2N−1−gA} of the load-balanced split of {@code N = A·B}; gathered in position
     * order these are two contiguous runs, chunks {@code g} and {@code 2B−1−g} of a split into
     * {@code 2B}: exactly the load-balanced split of the ring of {@code B}, so the ring's per-step
     * visibility is that of {@code p2p} over {@code B} ranks. Needs the heads of a tensor-parallel rank
     * divisible by {@code A}.
     */
    A2A_P2P("a2a+p2p");

    private final String flag;

    CpCommType(String flag) {
        this.flag = flag;
    }

    /** @return Megatron-LM's name of this method, as given to {@code --cp-comm-type} */
    public String flag() {
        return flag;
    }

    /**
     * Parses Megatron-LM's name of a method.
     *
     * @param name {@code "allgather"}, {@code "p2p"}, {@code "a2a"} or {@code "a2a+p2p"} (case-insensitive;
     *     {@code "all_gather"} accepted)
     * @return the method
     * @throws IllegalArgumentException naming the value and the supported ones
     */
    public static CpCommType fromFlag(String name) {
        String n = name == null ? "" : name.toLowerCase(Locale.ROOT).replace("_", "");
        for (CpCommType t : values()) {
            if (t.flag.equals(n)) {
                return t;
            }
        }
        throw new IllegalArgumentException("--cp-comm-type " + name + " is not supported; supported: "
                + Arrays.stream(values()).map(CpCommType::flag).toList());
    }
}
