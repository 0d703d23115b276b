package io.mcore4j.parallel;

import java.util.ArrayList;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.Set;
import java.util.List;
import java.util.Map;

/**
 * This rank's process groups and their communicators, derived from a {@link ParallelDims}: the
 * explicit replacement for Megatron-Core's module-level parallel state. Pass it (or the single
 * communicators a component needs) to constructors; nothing is looked up globally.
 *
 * <p>{@code world} holds every rank. Dense groups: {@code tp}, {@code cp}, {@code dp}, {@code dp-cp}, {@code pp}, {@code mp}
 * (tp-pp), {@code tp-dp}, {@code embedding} (first and last pipeline stage of this rank's pipeline).
 * Expert groups: {@code ep}, {@code expert-tp}, {@code expert-dp}. With hierarchical context
 * parallelism ({@link ParallelDims#hierarchicalContextParallelSizes()}), one group per level,
 * {@code hcp-0}, {@code hcp-1}, …: level {@code k} holds the context-parallel ranks that differ from
 * this one only in the {@code k}-th digit of their context-parallel index written in the mixed radix
 * of the level sizes (innermost first), so level 0 is consecutive ranks of the {@code cp} group and
 * level 1 strides over level 0's size, as Megatron-Core builds them. Communicators are created in
 * that fixed order on every rank.
 */
public final class ProcessGroups {
    private final ParallelDims dims;
    private final int rank;
    private final RankGrid dense;
    private final RankGrid expert;
    private final Map<String, Communicator> communicators = new LinkedHashMap<>();
    private final int hierarchicalLevels;

    private ProcessGroups(ParallelDims dims, int rank, Backend backend) {
        if (backend.worldSize() != dims.worldSize()) {
            throw new IllegalArgumentException("backend has world size " + backend.worldSize()
                    + " but the layout needs " + dims.worldSize());
        }
        this.dims = dims;
        this.rank = rank;
        this.dense = RankGrid.dense(dims);
        this.expert = RankGrid.expert(dims);
        int[] world = new int[dims.worldSize()];
        for (int r = 0; r < world.length; r++) {
            world[r] = r;
        }
        add(backend, "world", world);
        add(backend, "tp", dense.groupOf("tp", rank));
        add(backend, "cp", dense.groupOf("cp", rank));
        add(backend, "dp", dense.groupOf("dp", rank));
        add(backend, "dp-cp", dense.groupOf("cp-dp", rank));
        int[] pp = dense.groupOf("pp", rank);
        add(backend, "pp", pp);
        add(backend, "mp", dense.groupOf("tp-pp", rank));
        add(backend, "tp-dp", dense.groupOf("tp-dp", rank));
        add(backend, "embedding", pp.length == 1 ? pp : new int[] {pp[0], pp[pp.length - 1]}, pp);
        add(backend, "ep", expert.groupOf("ep", rank));
        add(backend, "expert-tp", expert.groupOf("tp", rank));
        add(backend, "expert-dp", expert.groupOf("dp", rank));
        int[] cp = dense.groupOf("cp", rank);
        List<Integer> levels = dims.hierarchicalContextParallelSizes();
        for (int level = 0; level < levels.size(); level++) {
            add(backend, "hcp-" + level, hierarchicalGroup(cp, dense.coordinate("cp", rank), levels, level));
        }
        this.hierarchicalLevels = levels.size();
    }

    /**
     * The members of {@code cp} whose index differs from {@code index} only in digit {@code level}
     * of the mixed radix {@code sizes} (innermost digit first).
     */
    static int[] hierarchicalGroup(int[] cp, int index, List<Integer> sizes, int level) {
        int stride = 1;
        for (int k = 0; k < level; k++) {
            stride *= sizes.get(k);
        }
        int size = sizes.get(level);
        int first = index - (index / stride % size) * stride;
        int[] members = new int[size];
        for (int i = 0; i < size; i++) {
            members[i] = cp[first + i * stride];
        }
        return members;
    }

    /**
     * Builds this rank's groups over {@code backend}.
     *
     * @param dims the layout
     * @param backend this rank's backend (its world rank is this rank)
     * @return the groups
     */
    public static ProcessGroups create(ParallelDims dims, Backend backend) {
        return new ProcessGroups(dims, backend.worldRank(), backend);
    }

    private void add(Backend backend, String name, int[] ranks) {
        communicators.put(name, backend.communicator(ProcessGroup.of(name, ranks, rank)));
    }

    /** Embedding group: only first and last stages are members; middle stages get a group of themselves. */
    private void add(Backend backend, String name, int[] ranks, int[] pipeline) {
        boolean member = false;
        for (int r : ranks) {
            member |= r == rank;
        }
        add(backend, name, member ? ranks : new int[] {rank});
    }

    /** @return the layout */
    public ParallelDims dims() {
        return dims;
    }

    /** @return this process's global rank */
    public int worldRank() {
        return rank;
    }

    /** @return the dense rank grid */
    public RankGrid denseGrid() {
        return dense;
    }

    /** @return the expert rank grid */
    public RankGrid expertGrid() {
        return expert;
    }

    /**
     * The communicator of a group by name (see the class comment for names).
     *
     * @param name the group name
     * @return its communicator
     */
    public Communicator get(String name) {
        Communicator c = communicators.get(name);
        if (c == null) {
            throw new IllegalArgumentException("no group \"" + name + "\"; groups are " + communicators.keySet());
        }
        return c;
    }

    /**
     * {@link Communicator#prepareCapture()} of each of this rank's communicators once, in the groups' order of
     * creation, which is the same on every rank: before a CUDA graph capture, at the same point on every rank.
     */
    public void prepareCapture() {
        Set<Communicator> done = Collections.newSetFromMap(new IdentityHashMap<>());
        for (Communicator c : communicators.values()) {
            if (done.add(c)) {
                c.prepareCapture();
            }
        }
    }

    /** @return every rank (checkpoint validation, logging) */
    public Communicator world() {
        return get("world");
    }

    /** @return tensor-parallel communicator */
    public Communicator tp() {
        return get("tp");
    }

    /** @return context-parallel communicator */
    public Communicator cp() {
        return get("cp");
    }

    /**
     * The levels of hierarchical context parallelism (Megatron-Core's
     * {@code get_hierarchical_context_parallel_groups}): {@code a2a+p2p}'s all-to-all group is level 0,
     * its ring level 1.
     *
     * @return one communicator per level, innermost first; empty (never null) without hierarchical sizes
     */
    public List<Communicator> hierarchicalCp() {
        List<Communicator> out = new ArrayList<>(hierarchicalLevels);
        for (int level = 0; level < hierarchicalLevels; level++) {
            out.add(get("hcp-" + level));
        }
        return List.copyOf(out);
    }

    /** @return data-parallel communicator */
    public Communicator dp() {
        return get("dp");
    }

    /** @return data x context parallel communicator (gradient averaging of dense weights) */
    public Communicator dpCp() {
        return get("dp-cp");
    }

    /** @return pipeline-parallel communicator */
    public Communicator pp() {
        return get("pp");
    }

    /** @return model-parallel (TP x PP) communicator */
    public Communicator modelParallel() {
        return get("mp");
    }

    /** @return TP x DP communicator */
    public Communicator tpDp() {
        return get("tp-dp");
    }

    /** @return first and last pipeline stage (tied embeddings); a group of one on middle stages */
    public Communicator embedding() {
        return get("embedding");
    }

    /** @return expert-parallel communicator */
    public Communicator ep() {
        return get("ep");
    }

    /** @return tensor-parallel communicator inside experts */
    public Communicator expertTp() {
        return get("expert-tp");
    }

    /** @return expert-data-parallel communicator (expert gradient averaging) */
    public Communicator expertDp() {
        return get("expert-dp");
    }

    /** @return this rank's pipeline stage */
    public int pipelineRank() {
        return dense.coordinate("pp", rank);
    }

    /** @return whether this rank runs the first pipeline stage */
    public boolean isFirstStage() {
        return pipelineRank() == 0;
    }

    /** @return whether this rank runs the last pipeline stage */
    public boolean isLastStage() {
        return pipelineRank() == dims.pipelineParallel() - 1;
    }

    /** @return this rank's tensor-parallel index */
    public int tensorParallelRank() {
        return dense.coordinate("tp", rank);
    }

    /** @return this rank's data-parallel index */
    public int dataParallelRank() {
        return dense.coordinate("dp", rank);
    }

    @Override
    public String toString() {
        StringBuilder b = new StringBuilder("ProcessGroups{rank ").append(rank).append(", ").append(dims);
        communicators.forEach((k, v) -> b.append(", ").append(v.group()));
        return b.append('}').toString();
    }
}
