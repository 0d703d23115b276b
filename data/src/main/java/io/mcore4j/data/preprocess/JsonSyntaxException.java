package io.mcore4j.data.preprocess;

/** Malformed JSON, or JSON without the expected fields; the message gives the 1-based column. */
public final class JsonSyntaxException extends IllegalArgumentException {
    private static final long serialVersionUID = 1L;

    private final int column;

    /**
     * Creates the exception.
     *
     * @param problem what is wrong
     * @param column 1-based character column where it was found
     */
    public JsonSyntaxException(String problem, int column) {
        super(problem + " at column " + column);
        this.column = column;
    }

    /**
     * Where the problem was found.
     *
     * @return 1-based character column
     */
    public int column() {
        return column;
    }
}
