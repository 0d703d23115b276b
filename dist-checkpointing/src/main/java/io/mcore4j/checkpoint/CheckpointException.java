package io.mcore4j.checkpoint;

/**
 * A checkpoint could not be saved or loaded. Subclasses say why: {@link InvalidShardingException}
 * (the shards given to a save do not tile their tensors), {@link CorruptCheckpointException} (files
 * missing, truncated or damaged) and {@link IncompatibleCheckpointException} (a valid checkpoint
 * that does not fit what was asked). This class itself reports I/O failures.
 *
 * <p>Collective operations raise the same exception type with the same message on every rank, so
 * that no rank carries on alone; the rank that saw the problem first keeps its original exception as
 * the cause.
 */
public class CheckpointException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    /** @param message what failed, naming the directory, file or key */
    public CheckpointException(String message) {
        super(message);
    }

    /**
     * @param message what failed, naming the directory, file or key
     * @param cause the underlying failure
     */
    public CheckpointException(String message, Throwable cause) {
        super(message, cause);
    }
}
