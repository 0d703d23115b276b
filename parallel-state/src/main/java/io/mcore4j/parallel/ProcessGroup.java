package io.mcore4j.parallel;

import java.util.Arrays;
import java.util.Objects;

/**
 * A named set of global ranks and this process's place in it.
 *
 * @param name what the group is for, e.g. {@code "tp"}, {@code "dp-cp"}, {@code "embedding"}
 * @param ranks member global ranks, in group order
 * @param rank this process's index in {@code ranks}
 */
public record ProcessGroup(String name, int[] ranks, int rank) {

    /** Validates that {@code rank} indexes {@code ranks} and ranks are distinct. */
    public ProcessGroup {
        Objects.requireNonNull(name, "name");
        ranks = ranks.clone();
        if (ranks.length == 0) {
            throw new IllegalArgumentException("group " + name + " has no ranks");
        }
        if (rank < 0 || rank >= ranks.length) {
            throw new IllegalArgumentException("group " + name + " " + Arrays.toString(ranks)
                    + ": index " + rank + " is outside [0, " + ranks.length + ")");
        }
        if (Arrays.stream(ranks).distinct().count() != ranks.length) {
            throw new IllegalArgumentException("group " + name + " lists a rank twice: " + Arrays.toString(ranks));
        }
    }

    /**
     * The group that contains {@code globalRank}.
     *
     * @param name the group's name
     * @param ranks member global ranks
     * @param globalRank this process's global rank, which must be a member
     * @return the group
     */
    public static ProcessGroup of(String name, int[] ranks, int globalRank) {
        for (int i = 0; i < ranks.length; i++) {
            if (ranks[i] == globalRank) {
                return new ProcessGroup(name, ranks, i);
            }
        }
        throw new IllegalArgumentException("rank " + globalRank + " is not in group " + name + " " + Arrays.toString(ranks));
    }

    /** @return number of members */
    public int size() {
        return ranks.length;
    }

    /** @return the member global ranks (a copy) */
    @Override
    public int[] ranks() {
        return ranks.clone();
    }

    /**
     * Global rank of member {@code index}.
     *
     * @param index position in the group
     * @return the global rank
     */
    public int globalRank(int index) {
        return ranks[index];
    }

    /**
     * Checks that a backend of global rank {@code worldRank} in a world of {@code worldSize} ranks
     * can serve this group: this process sits at index {@link #rank()}, and every member is a rank
     * of the world.
     *
     * @param worldRank the backend's global rank
     * @param worldSize the backend's world size
     * @throws IllegalArgumentException naming the group and the rank that does not fit
     */
    public void checkPlacement(int worldRank, int worldSize) {
        if (ranks[rank] != worldRank) {
            throw new IllegalArgumentException("group " + this + " does not place rank " + worldRank + " at index " + rank);
        }
        for (int r : ranks) {
            if (r >= worldSize) {
                throw new IllegalArgumentException("group " + this + " names rank " + r + " outside world size " + worldSize);
            }
        }
    }

    /** @return a stable identifier of the group across ranks, e.g. {@code tp[0,1]} */
    public String key() {
        StringBuilder b = new StringBuilder(name).append('[');
        for (int i = 0; i < ranks.length; i++) {
            b.append(i == 0 ? "" : ",").append(ranks[i]);
        }
        return b.append(']').toString();
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof ProcessGroup g && name.equals(g.name) && Arrays.equals(ranks, g.ranks) && rank == g.rank;
    }

    @Override
    public int hashCode() {
        return Objects.hash(name, Arrays.hashCode(ranks), rank);
    }

    @Override
    public String toString() {
        return key() + "@" + rank;
    }
}
