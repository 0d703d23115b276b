package io.mcore4j.checkpoint;

/**
 * The shards handed to a save do not describe each tensor exactly once: two main replicas overlap,
 * some element has no main replica, ranks disagree on a tensor's dtype or global shape, or a dtype
 * cannot be stored. Nothing is written (no {@code mcore4j_metadata.json}) when this is thrown.
 */
public class InvalidShardingException extends CheckpointException {
    private static final long serialVersionUID = 1L;

    /** @param message what is wrong, naming the key */
    public InvalidShardingException(String message) {
        super(message);
    }

    /**
     * @param message what is wrong, naming the key
     * @param cause the original failure
     */
    public InvalidShardingException(String message, Throwable cause) {
        super(message, cause);
    }
}
