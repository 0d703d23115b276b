package io.mcore4j.checkpoint;

/**
 * A sound checkpoint that does not fit the load: it was written in a newer format version, a
 * tensor's global shape or dtype differs from the requested one, or (under a raising
 * {@link StrictMode}) keys are missing or unexpected. The message names the key or file and both
 * sides of the mismatch.
 */
public class IncompatibleCheckpointException extends CheckpointException {
    private static final long serialVersionUID = 1L;

    /** @param message what differs, naming the key or file */
    public IncompatibleCheckpointException(String message) {
        super(message);
    }

    /**
     * @param message what differs, naming the key or file
     * @param cause the original failure
     */
    public IncompatibleCheckpointException(String message, Throwable cause) {
        super(message, cause);
    }
}
