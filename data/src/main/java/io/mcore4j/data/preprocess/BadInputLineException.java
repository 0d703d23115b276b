package io.mcore4j.data.preprocess;

import java.io.IOException;
import java.nio.file.Path;

/** An input line that could not be used, under {@code --on-bad-line fail}; names the file and line. */
public final class BadInputLineException extends IOException {
    private static final long serialVersionUID = 1L;

    private final long lineNumber;

    /**
     * Creates the exception.
     *
     * @param file the input file
     * @param lineNumber 1-based line number
     * @param problem what is wrong with the line
     */
    public BadInputLineException(Path file, long lineNumber, String problem) {
        super("file " + file + " line " + lineNumber + ": " + problem);
        this.lineNumber = lineNumber;
    }

    /**
     * The offending line.
     *
     * @return 1-based line number
     */
    public long lineNumber() {
        return lineNumber;
    }
}
