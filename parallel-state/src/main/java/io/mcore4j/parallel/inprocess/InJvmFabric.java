package io.mcore4j.parallel.inprocess;

import ai.djl.ndarray.NDArray;
import io.mcore4j.parallel.CommunicationException;
import io.mcore4j.parallel.ProcessGroup;

import java.time.Duration;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.LinkedBlockingQueue;

/**
 * The shared medium of one in-JVM world: a rendezvous per group and a mailbox per ordered pair of
 * ranks per group. One fabric per world, created by {@link InJvmWorld} (or by hand for custom
 * launchers) and handed to each rank's {@link InJvmBackend}; separate worlds never share state.
 */
public final class InJvmFabric {
    private final int worldSize;
    private final Duration timeout;
    private final Map<String, Rendezvous> rendezvous = new ConcurrentHashMap<>();
    private final Map<String, LinkedBlockingQueue<NDArray>> mailboxes = new ConcurrentHashMap<>();
    private volatile CommunicationException aborted;

    /**
     * @param worldSize number of ranks
     * @param timeout how long a rank waits for its peers
     */
    public InJvmFabric(int worldSize, Duration timeout) {
        if (worldSize < 1) {
            throw new IllegalArgumentException("world size must be at least 1, got " + worldSize);
        }
        if (timeout.isNegative() || timeout.isZero()) {
            throw new IllegalArgumentException("timeout must be positive, got " + timeout);
        }
        this.worldSize = worldSize;
        this.timeout = timeout;
    }

    /** @return number of ranks */
    public int worldSize() {
        return worldSize;
    }

    /** @return the peer timeout */
    public Duration timeout() {
        return timeout;
    }

    /**
     * A backend for one rank of this world.
     *
     * @param rank the global rank
     * @return its backend
     */
    public InJvmBackend backend(int rank) {
        if (rank < 0 || rank >= worldSize) {
            throw new IllegalArgumentException("rank " + rank + " is outside [0, " + worldSize + ")");
        }
        return new InJvmBackend(this, rank);
    }

    /**
     * Breaks every group: ranks waiting now and later fail with {@code cause} (used when a rank dies).
     *
     * @param cause names the failed rank
     */
    public void abort(CommunicationException cause) {
        aborted = cause;
        rendezvous.values().forEach(r -> r.abort(cause));
    }

    Rendezvous rendezvous(ProcessGroup group) {
        Rendezvous r = rendezvous.computeIfAbsent(group.key(), k -> new Rendezvous(group));
        CommunicationException a = aborted;
        if (a != null) {
            r.abort(a);
        }
        return r;
    }

    LinkedBlockingQueue<NDArray> mailbox(ProcessGroup group, int fromGlobal, int toGlobal) {
        return mailboxes.computeIfAbsent(group.key() + ":" + fromGlobal + "->" + toGlobal, k -> new LinkedBlockingQueue<>());
    }

    CommunicationException aborted() {
        return aborted;
    }

    /** Closes tensors that were sent and never received. */
    void drainMailboxes() {
        for (LinkedBlockingQueue<NDArray> q : mailboxes.values()) {
            for (NDArray a; (a = q.poll()) != null; ) {
                a.close();
            }
        }
    }
}
