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

    /**
     * An integer entry of {@link #common()} that the caller cannot resume without (e.g.
     * {@code iteration}, {@code consumed_samples}).
     *
     * @param key the entry's name
     * @return its value
     * @throws CorruptCheckpointException naming the key if it is absent, not a number, or not a whole
     *         number that fits a {@code long}
     */
    public long requireLong(String key) {
        Object value = common.get(key);
        if (value == null) {
            throw new CorruptCheckpointException("the checkpoint's common state has no '" + key + "' (its keys: "
                    + new java.util.TreeSet<>(common.keySet()) + ")");
        }
        if (value instanceof Long || value instanceof Integer || value instanceof Short || value instanceof Byte) {
            return ((Number) value).longValue();
        }
        if (value instanceof Number n) {
            double d = n.doubleValue();
            if (d == Math.rint(d) && Math.abs(d) < 0x1p63) {
                return (long) d;
            }
        }
        throw new CorruptCheckpointException("the checkpoint's common state holds " + key + " = " + value
                + ", not an integer");
    }
}
