package io.mcore4j.parallel.inprocess;

import io.mcore4j.parallel.Backend;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ProcessGroup;

/** One rank's view of an {@link InJvmFabric}. */
public final class InJvmBackend implements Backend {
    private final InJvmFabric fabric;
    private final int rank;

    InJvmBackend(InJvmFabric fabric, int rank) {
        this.fabric = fabric;
        this.rank = rank;
    }

    @Override
    public int worldRank() {
        return rank;
    }

    @Override
    public int worldSize() {
        return fabric.worldSize();
    }

    @Override
    public Communicator communicator(ProcessGroup group) {
        group.checkPlacement(rank, fabric.worldSize());
        return new InJvmCommunicator(fabric, group);
    }

    @Override
    public void close() {
        // communicators hold no resources of their own
    }
}
