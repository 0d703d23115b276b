package io.mcore4j.checkpoint;

import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * What a load returns besides the tensors it filled in place.
 *
 * @param common the non-tensor state saved with the checkpoint (iteration, RNG seeds, loss scale,
 *     scheduler, ...), as JSON values: integers come back as {@code Long}, decimals as {@code Double}
 * @param missingKeys keys some rank asked for that the checkpoint lacks, sorted; identical on every rank
 * @param unexpectedKeys keys stored in the checkpoint that no rank asked for, sorted; identical on every rank
 */
public record LoadResult(Map<String, Object> common, List<String> missingKeys, List<String> unexpectedKeys) {
    /** Copies the key lists; the common map is the parsed metadata's, not shared with anything else. */
    public LoadResult {
        Objects.requireNonNull(common, "common");
        missingKeys = List.copyOf(missingKeys);
        unexpectedKeys = List.copyOf(unexpectedKeys);
    }

    /** @return the common state with typed getters ({@code getLong("iteration")}, ...) */
    public CommonState commonState() {
        return new CommonState(common);
    }

    /**
     * An integer entry of {@link #common()} that the caller cannot resume without (e.g.
     * {@code iteration}, {@code consumed_samples}); {@code commonState().getLong(key)}.
     *
     * @param key the entry's name
     * @return its value
     * @throws CorruptCheckpointException naming the key if it is absent, not a number, or not a whole
     *         number that fits a {@code long}
     */
    public long requireLong(String key) {
        return commonState().getLong(key);
    }
}
