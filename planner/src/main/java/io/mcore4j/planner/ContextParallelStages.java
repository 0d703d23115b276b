package io.mcore4j.planner;

import io.mcore4j.models.TransformerConfig;

/**
 * The two stages a {@code --cp-comm-type} may run, by group size: an all-to-all that trades heads for
 * tokens over {@code allToAll} ranks, then a key/value ring over {@code ring} ranks. {@code p2p} is
 * a ring of CP, {@code a2a} an all-to-all of CP, {@code a2a+p2p} its two hierarchical levels
 * ({@code A·B = CP}); {@code allgather} is modelled as the ring it costs as much as (one gather of the
 * same {@code CP−1} blocks). A stage of one rank costs nothing.
 *
 * @param allToAll ranks of the all-to-all stage (1: none)
 * @param ring ranks of the ring stage (1: none)
 * @param groupRepeat how many times the all-to-all repeats each key/value group so that its size divides
 *     their number (1 without an all-to-all)
 */
record ContextParallelStages(int allToAll, int ring, int groupRepeat) {

    /**
     * @param c the model as built for the layout (its comm type and hierarchical sizes)
     * @param tp the layout's TP size
     * @param cp the layout's CP size
     * @return the stages (none at CP1)
     * @throws IllegalArgumentException if the model's hierarchical sizes do not fit the layout
     */
    static ContextParallelStages of(TransformerConfig c, int tp, int cp) {
        if (cp == 1) {
            return new ContextParallelStages(1, 1, 1);
        }
        c.validateContextParallel(tp, cp);
        int allToAll = switch (c.cpCommType()) {
            case A2A -> cp;
            case A2A_P2P -> c.hierarchicalContextParallelSizes().get(0);
            case P2P, ALL_GATHER -> 1;
        };
        int groups = Math.max(1, c.numQueryGroups() / tp);
        return new ContextParallelStages(allToAll, cp / allToAll, allToAll / gcd(groups, allToAll));
    }

    private static int gcd(int a, int b) {
        return b == 0 ? a : gcd(b, a % b);
    }
}
