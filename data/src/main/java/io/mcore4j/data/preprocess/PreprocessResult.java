package io.mcore4j.data.preprocess;

import io.mcore4j.data.indexed.DType;

import java.nio.file.Path;
import java.util.List;

/**
 * What a {@link Preprocess} run wrote.
 *
 * @param documents documents written per key (good lines)
 * @param skippedLines malformed lines skipped
 * @param blankLines empty lines ignored
 * @param tokens tokens written, over all keys
 * @param inputBytes bytes of input read
 * @param seconds wall time
 * @param dtype token type of the outputs
 * @param outputs one dataset prefix per JSON key
 */
public record PreprocessResult(long documents, long skippedLines, long blankLines, long tokens, long inputBytes,
                               double seconds, DType dtype, List<Path> outputs) {
    /** Copies the outputs. */
    public PreprocessResult {
        outputs = List.copyOf(outputs);
    }

    /**
     * Input throughput.
     *
     * @return megabytes (10^6 bytes) of input per second
     */
    public double megabytesPerSecond() {
        return inputBytes / 1e6 / Math.max(seconds, 1e-9);
    }
}
