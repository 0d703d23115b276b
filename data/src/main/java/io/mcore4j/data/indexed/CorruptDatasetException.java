package io.mcore4j.data.indexed;

import java.io.IOException;
import java.nio.file.Path;

/**
 * A dataset file whose contents contradict the format: bad magic, unknown version or dtype, counts or
 * pointers that overrun the file, inconsistent document indices. The message names the file and the
 * offending values.
 */
public final class CorruptDatasetException extends IOException {
    private static final long serialVersionUID = 1L;

    private final transient Path file;

    /**
     * Creates the exception.
     *
     * @param file the corrupt file
     * @param problem what is wrong, naming the values read
     */
    public CorruptDatasetException(Path file, String problem) {
        super("file " + file + ": " + problem);
        this.file = file;
    }

    /**
     * The corrupt file.
     *
     * @return its path
     */
    public Path file() {
        return file;
    }
}
