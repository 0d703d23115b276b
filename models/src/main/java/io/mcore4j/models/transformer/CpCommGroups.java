package io.mcore4j.models.transformer;

import io.mcore4j.contextparallel.CpCommType;
import io.mcore4j.parallel.Communicator;

import java.util.List;

/**
 * The groups over which the stages of a model's {@code --cp-comm-type} run: the heads-for-tokens
 * all-to-all ({@code a2a} over the whole context-parallel group, {@code a2a+p2p} over its first
 * hierarchical level) and the key/value ring ({@code p2p} over the whole group, {@code a2a+p2p} over
 * the second level). A stage whose group has one rank is no stage: {@code a2a+p2p} with sizes
 * {@code 1 N} is {@code p2p}, with {@code N 1} it is {@code a2a}.
 */
final class CpCommGroups {
    private CpCommGroups() {}

    /**
     * @param ctx the model context
     * @return the all-to-all's group, or null when this comm type has no all-to-all of more than one rank
     * @throws IllegalArgumentException if {@code a2a+p2p} finds no two hierarchical levels in the groups
     */
    static Communicator allToAll(ModelContext ctx) {
        return switch (ctx.config().cpCommType()) {
            case A2A -> moreThanOne(ctx.groups().cp());
            case A2A_P2P -> moreThanOne(level(ctx, 0));
            case P2P, ALL_GATHER -> null;
        };
    }

    /**
     * @param ctx the model context
     * @return the key/value ring's group, or null when this comm type has no ring of more than one rank
     * @throws IllegalArgumentException if {@code a2a+p2p} finds no two hierarchical levels in the groups
     */
    static Communicator ring(ModelContext ctx) {
        return switch (ctx.config().cpCommType()) {
            case P2P -> moreThanOne(ctx.groups().cp());
            case A2A_P2P -> moreThanOne(level(ctx, 1));
            case A2A, ALL_GATHER -> null;
        };
    }

    private static Communicator level(ModelContext ctx, int level) {
        List<Communicator> levels = ctx.groups().hierarchicalCp();
        if (levels.size() != 2) {
            throw new IllegalArgumentException("--cp-comm-type " + CpCommType.A2A_P2P.flag() + " runs over two hierarchical"
                    + " context-parallel groups (--hierarchical-context-parallel-sizes); this rank's groups have "
                    + levels.size() + " levels");
        }
        return levels.get(level);
    }

    private static Communicator moreThanOne(Communicator c) {
        return c.size() > 1 ? c : null;
    }
}
