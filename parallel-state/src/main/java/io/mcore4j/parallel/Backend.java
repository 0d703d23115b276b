package io.mcore4j.parallel;

/**
 * Creates communicators for this process's groups: one implementation per transport (in-JVM
 * threads, TCP processes, NCCL). A backend belongs to one global rank.
 *
 * <p>{@link #communicator(ProcessGroup)} is called by every member of a group (each on its own
 * rank), in the same order on every rank; backends whose setup is collective rely on that.
 */
public interface Backend extends AutoCloseable {

    /** @return this process's global rank */
    int worldRank();

    /** @return number of global ranks */
    int worldSize();

    /**
     * A communicator over {@code group}, which must contain {@link #worldRank()}.
     *
     * @param group the group
     * @return the communicator, owned by this backend
     */
    Communicator communicator(ProcessGroup group);

    /** Releases every communicator this backend created. */
    @Override
    void close();
}
