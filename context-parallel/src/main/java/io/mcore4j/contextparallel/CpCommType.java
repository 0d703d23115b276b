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
    A2A("a2a");

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
     * @param name {@code "allgather"}, {@code "p2p"} or {@code "a2a"} (case-insensitive; {@code "all_gather"} accepted)
     * @return the method
     * @throws IllegalArgumentException naming the value and the supported ones ({@code a2a+p2p} is a
     *         Megatron-Core method that is not implemented)
     */
    public static CpCommType fromFlag(String name) {
        String n = name == null ? "" : name.toLowerCase(Locale.ROOT).replace("_", "");
        for (CpCommType t : values()) {
            if (t.flag.equals(n)) {
                return t;
            }
        }
        throw new IllegalArgumentException("--cp-comm-type " + name + " is not supported; supported: "
                + Arrays.stream(values()).map(CpCommType::flag).toList()
                + (n.startsWith("a2a") ? " (Megatron-Core's a2a+p2p is not implemented)" : ""));
    }
}
