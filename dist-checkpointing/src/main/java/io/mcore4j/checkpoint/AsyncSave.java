package io.mcore4j.checkpoint;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * A save whose shard files are being written on a background thread while training goes on.
 *
 * <p>By the time {@link DistCheckpointing#saveAsync} returns, the sharding has been validated on all
 * ranks and this rank's main-replica shards have been copied to host memory, so the caller may
 * update its parameters at once. The copies are owned by this object and released as soon as the
 * file is written. The checkpoint is not complete, and not loadable, until every rank has called
 * {@link #finish()}: that collective (over the save's world communicator) waits for every rank's
 * file and then has rank 0 write {@code mcore4j_metadata.json}.
 *
 * <p>Every rank must call {@link #finish()} exactly once before starting another save with the
 * same communicator; later calls return at once (or rethrow the first failure). Not thread-safe:
 * call it from the rank's own thread.
 */
public final class AsyncSave {
    private final SaveSession session;
    private final List<Runnable> afterCommit = new ArrayList<>();
    private boolean finished;
    private CheckpointException failure;

    AsyncSave(SaveSession session) {
        this.session = session;
    }

    /** @return the checkpoint directory being written */
    public Path directory() {
        return session.directory();
    }

    /** @return whether this rank's background write has ended (successfully or not); does not communicate */
    public boolean isWritten() {
        return session.isWritten();
    }

    /**
     * Waits for this rank's file, then completes the checkpoint collectively. Returns on every rank
     * only if every rank's file was written and {@code mcore4j_metadata.json} is on disk.
     *
     * @throws CheckpointException on every rank if any rank's background write failed (with that
     *     rank's failure as the message) or the metadata could not be written; no
     *     {@code mcore4j_metadata.json} exists then
     */
    public void finish() {
        if (finished) {
            if (failure != null) {
                throw failure;
            }
            return;
        }
        finished = true;
        try {
            session.finish();
            for (Runnable action : afterCommit) {
                action.run();
            }
        } catch (CheckpointException e) {
            failure = e;
            throw e;
        }
    }

    /** @return whether {@link #finish()} has been called on this rank */
    boolean isFinished() {
        return finished;
    }

    /** Adds a collective step every rank runs after the checkpoint is complete (the manager's commit). */
    void afterCommit(Runnable action) {
        afterCommit.add(action);
    }
}
