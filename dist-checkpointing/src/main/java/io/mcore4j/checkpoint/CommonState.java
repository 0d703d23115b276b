package io.mcore4j.checkpoint;

import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.TreeSet;

/**
 * Typed reads of a checkpoint's common (non-tensor) state: iteration, consumed samples, loss scale,
 * scheduler position. The state is stored as JSON, so numbers come back as {@code Long} (integers)
 * or {@code Double}; these getters convert where no information is lost and otherwise throw a
 * {@link CorruptCheckpointException} naming the key and the value found (or the keys there are),
 * instead of leaving a {@code (Number)} cast to every caller.
 *
 * @param values the parsed state, as {@link LoadResult#common()} and
 *     {@link DistCheckpointing#loadCommon} return it
 */
public record CommonState(Map<String, Object> values) {
    /** Refuses a null map. */
    public CommonState {
        Objects.requireNonNull(values, "values");
    }

    /**
     * @param key a key
     * @return whether the state holds it (with any value, null included)
     */
    public boolean contains(String key) {
        return values.containsKey(key);
    }

    /**
     * @param key a key holding an integer
     * @return its value
     * @throws CorruptCheckpointException if the key is missing or holds something else (a decimal
     *     with a fraction, text, ...)
     */
    public long getLong(String key) {
        Object v = require(key);
        if (v instanceof Long || v instanceof Integer || v instanceof Short || v instanceof Byte) {
            return ((Number) v).longValue();
        }
        if (v instanceof Number n && n.doubleValue() == Math.rint(n.doubleValue()) && Math.abs(n.doubleValue()) < 0x1p63) {
            return (long) n.doubleValue();
        }
        throw wrongType(key, v, "an integer");
    }

    /**
     * @param key a key holding an integer that fits an {@code int}
     * @return its value
     * @throws CorruptCheckpointException if the key is missing, holds something else, or is out of range
     */
    public int getInt(String key) {
        long v = getLong(key);
        if (v < Integer.MIN_VALUE || v > Integer.MAX_VALUE) {
            throw new CorruptCheckpointException("the checkpoint's common state holds " + key + " = " + v
                    + ", out of int range");
        }
        return (int) v;
    }

    /**
     * @param key a key holding a number
     * @return its value as a double
     * @throws CorruptCheckpointException if the key is missing or holds something other than a number
     */
    public double getDouble(String key) {
        Object v = require(key);
        if (v instanceof Number n) {
            return n.doubleValue();
        }
        throw wrongType(key, v, "a number");
    }

    /**
     * @param key a key holding text
     * @return its value
     * @throws CorruptCheckpointException if the key is missing or holds something other than text
     */
    public String getString(String key) {
        Object v = require(key);
        if (v instanceof String s) {
            return s;
        }
        throw wrongType(key, v, "text");
    }

    /**
     * @param key a key holding a boolean
     * @return its value
     * @throws CorruptCheckpointException if the key is missing or holds something other than a boolean
     */
    public boolean getBoolean(String key) {
        Object v = require(key);
        if (v instanceof Boolean b) {
            return b;
        }
        throw wrongType(key, v, "a boolean");
    }

    /**
     * @param key a key holding a JSON array
     * @return its elements, as JSON values
     * @throws CorruptCheckpointException if the key is missing or holds something other than an array
     */
    public List<?> getList(String key) {
        Object v = require(key);
        if (v instanceof List<?> l) {
            return l;
        }
        throw wrongType(key, v, "a list");
    }

    private Object require(String key) {
        Object v = values.get(key);
        if (v == null) {
            if (values.containsKey(key)) {
                throw new CorruptCheckpointException("the checkpoint's common state holds " + key + " = null");
            }
            throw new CorruptCheckpointException("the checkpoint's common state has no '" + key + "' (its keys: "
                    + new TreeSet<>(values.keySet()) + ")");
        }
        return v;
    }

    private static CorruptCheckpointException wrongType(String key, Object v, String expected) {
        return new CorruptCheckpointException("the checkpoint's common state holds " + key + " = " + v + ", not "
                + expected);
    }
}
