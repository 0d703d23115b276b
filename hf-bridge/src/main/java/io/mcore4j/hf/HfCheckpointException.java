package io.mcore4j.hf;

/**
 * A Hugging Face checkpoint that cannot be imported or written: a missing file or tensor, a shape
 * that does not match {@code config.json}, an unsupported architecture, config field or dtype. The
 * message names the file and, where one is involved, the tensor or config key.
 */
public final class HfCheckpointException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    /** @param message what is wrong, naming file and tensor */
    public HfCheckpointException(String message) {
        super(message);
    }

    /** @param message what is wrong, naming file and tensor @param cause the underlying failure */
    public HfCheckpointException(String message, Throwable cause) {
        super(message, cause);
    }
}
