package io.mcore4j.checkpoint.json;

/**
 * Text that is not valid JSON, or a value that JSON cannot represent.
 *
 * <p>For parse errors {@link #offset()} is the character offset where the problem was found and
 * the message names line and column; for write errors it is {@code -1} and the message names the
 * path of the offending value (e.g. {@code common.scheduler.steps[2]}).
 */
public final class JsonException extends RuntimeException {
    private static final long serialVersionUID = 1L;
    private final long offset;

    /**
     * @param message what is wrong and where
     * @param offset character offset of a parse error, or -1
     */
    public JsonException(String message, long offset) {
        super(message);
        this.offset = offset;
    }

    /** @return character offset of a parse error, or -1 for a write error */
    public long offset() {
        return offset;
    }
}
