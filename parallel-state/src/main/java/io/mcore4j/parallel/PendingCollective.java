package io.mcore4j.parallel;

import ai.djl.ndarray.NDArray;

/**
 * A collective started with {@link Communicator#startAllReduceInPlace},
 * {@link Communicator#startReduceScatter}, {@link Communicator#startAllGather} or
 * {@link Communicator#startAllToAll}, which may still be running alongside the caller's later device
 * work (on a GPU backend, on a second stream; the in-JVM and TCP backends run it at once).
 *
 * <p>Until {@link #await()} returns, the tensors given to the start call must stay open and
 * unmodified, and the result must not be read. {@code await()} orders the collective's completion
 * before everything the caller enqueues afterwards; it does not necessarily block the host. Call it
 * exactly once, on the thread that started the collective.
 */
@FunctionalInterface
public interface PendingCollective {

    /**
     * Waits for the collective (on a GPU backend: makes the caller's stream wait for it).
     *
     * @return the result: the in-place tensor, or this rank's reduce-scatter chunk, the gathered
     *         tensor or the received rows (owned by the manager given to the start call)
     * @throws CommunicationException if the collective failed or timed out
     */
    NDArray await();
}
