package io.mcore4j.data.gpt;

/**
 * The documents {@code [start, end)} of a source that one split uses.
 *
 * @param start first document
 * @param end one past the last document
 */
public record DocumentRange(long start, long end) {
    /** Validates the bounds. */
    public DocumentRange {
        if (start < 0 || end < start) {
            throw new IllegalArgumentException("document range [" + start + ", " + end + ") is invalid");
        }
    }

    /**
     * Number of documents.
     *
     * @return {@code end - start}
     */
    public long size() {
        return end - start;
    }

    /**
     * Whether the range holds no document.
     *
     * @return true if {@code start == end}
     */
    public boolean isEmpty() {
        return start == end;
    }
}
