package io.mcore4j.parallel.launch;

import io.mcore4j.parallel.Backend;
import io.mcore4j.parallel.ProcessGroup;

import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Objects;

/**
 * What every backend of a launched process (the TCP and NCCL backends) keeps the same way: its
 * {@link LaunchEnvironment} (rank and world size), the timeout of its blocking calls, whether it is
 * closed, and how many communicators it has made per group, so that calls for the same group on one
 * backend give independent communicators matched across ranks by call order. Subclasses synchronise
 * {@link #nextInstance} and {@link #markClosed} with their own communicator creation and close.
 */
public abstract class LaunchedBackend implements Backend {
    private final LaunchEnvironment env;
    private final Duration timeout;
    private final String kind;
    private final Map<String, Integer> instances = new HashMap<>();
    private boolean closed;

    /**
     * @param env this process's launch environment
     * @param timeout the timeout of every blocking call
     * @param kind the backend's name in messages, e.g. {@code "TCP"}
     */
    protected LaunchedBackend(LaunchEnvironment env, Duration timeout, String kind) {
        this.env = Objects.requireNonNull(env, "env");
        this.timeout = Objects.requireNonNull(timeout, "timeout");
        this.kind = kind;
    }

    @Override
    public final int worldRank() {
        return env.rank();
    }

    @Override
    public final int worldSize() {
        return env.worldSize();
    }

    /** @return the launch environment this backend connected with */
    public final LaunchEnvironment environment() {
        return env;
    }

    /** @return the timeout of every blocking call */
    public final Duration timeout() {
        return timeout;
    }

    /**
     * Checks that a communicator over {@code group} may be made now and numbers it.
     *
     * @param group a group containing this rank at its {@code rank()} index
     * @return how many communicators over the same group this backend made before
     * @throws IllegalStateException if the backend is closed
     * @throws IllegalArgumentException if the group does not place this rank at its index
     */
    protected final int nextInstance(ProcessGroup group) {
        if (closed) {
            throw new IllegalStateException("the " + kind + " backend of rank " + env.rank() + " is closed");
        }
        group.checkPlacement(env.rank(), env.worldSize());
        return instances.merge(group.key(), 1, Integer::sum) - 1;
    }

    /**
     * Marks the backend closed.
     *
     * @return false if it already was (a second close does nothing)
     */
    protected final boolean markClosed() {
        if (closed) {
            return false;
        }
        closed = true;
        return true;
    }
}
