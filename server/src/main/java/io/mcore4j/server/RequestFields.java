package io.mcore4j.server;

import io.mcore4j.data.preprocess.JsonSyntaxException;
import io.mcore4j.data.preprocess.StrictJson;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The fields of one JSON request body, read by name and type. Every read that finds a value of the wrong type or out
 * of range throws {@link OpenAiError#badRequest} naming the field, the value and what was expected; a JSON
 * {@code null} reads as an absent field (the default), as OpenAI's API takes it. Numbers are Python's: integers are
 * {@link Long}, other numbers {@link Double}; an integral double ({@code 5.0}) is an integer too.
 */
final class RequestFields {
    private final Map<String, Object> fields;

    private RequestFields(Map<String, Object> fields) {
        this.fields = fields;
    }

    /**
     * Parses a request body and refuses fields the endpoint does not know.
     *
     * @param body the JSON text
     * @param known the endpoint's field names
     * @return the fields
     * @throws OpenAiError 400 if the body is not one JSON object or names an unknown field
     */
    @SuppressWarnings("unchecked")
    static RequestFields parse(String body, Set<String> known) {
        Object root;
        try {
            root = StrictJson.parseKeepingIntegers(body);
        } catch (JsonSyntaxException e) {
            throw OpenAiError.badRequest(null, "the request body is not valid JSON: " + e.getMessage());
        }
        if (!(root instanceof Map<?, ?> map)) {
            throw OpenAiError.badRequest(null, "the request body must be a JSON object, got " + describe(root));
        }
        for (Object key : map.keySet()) {
            if (!known.contains(key)) {
                throw OpenAiError.badRequest((String) key, "unrecognized request argument supplied: " + key);
            }
        }
        return new RequestFields((Map<String, Object>) map);
    }

    /** @return whether the field is given (and not null) */
    boolean has(String name) {
        return fields.get(name) != null;
    }

    /** @return the raw value, or null */
    Object raw(String name) {
        return fields.get(name);
    }

    String string(String name, String fallback) {
        Object v = fields.get(name);
        if (v == null) {
            return fallback;
        }
        if (!(v instanceof String s)) {
            throw wrongType(name, v, "a string");
        }
        return s;
    }

    boolean bool(String name, boolean fallback) {
        Object v = fields.get(name);
        if (v == null) {
            return fallback;
        }
        if (!(v instanceof Boolean b)) {
            throw wrongType(name, v, "a boolean");
        }
        return b;
    }

    /**
     * @param name the field
     * @param fallback its default
     * @param min the least value allowed
     * @param max the greatest value allowed
     * @return the number
     */
    double number(String name, double fallback, double min, double max) {
        Object v = fields.get(name);
        if (v == null) {
            return fallback;
        }
        if (!(v instanceof Number n) || v instanceof java.math.BigInteger) {
            throw wrongType(name, v, "a number");
        }
        double d = n.doubleValue();
        if (!(d >= min && d <= max)) {
            throw OpenAiError.badRequest(name, name + " " + v + " must be " + range(min, max));
        }
        return d;
    }

    long integer(String name, long fallback, long min, long max) {
        Object v = fields.get(name);
        return v == null ? fallback : integerValue(name, v, min, max);
    }

    /** A list of integers in [min, max], or an empty array when absent. */
    int[] integers(String name, long min, long max) {
        Object v = fields.get(name);
        if (v == null) {
            return new int[0];
        }
        if (!(v instanceof List<?> list)) {
            throw wrongType(name, v, "a list of integers");
        }
        int[] out = new int[list.size()];
        for (int k = 0; k < out.length; k++) {
            out[k] = (int) integerValue(name, list.get(k), min, max);
        }
        return out;
    }

    /** A string or a list of strings, as a list (empty when absent). */
    List<String> strings(String name) {
        Object v = fields.get(name);
        if (v == null) {
            return List.of();
        }
        if (v instanceof String s) {
            return List.of(s);
        }
        if (!(v instanceof List<?> list)) {
            throw wrongType(name, v, "a string or a list of strings");
        }
        List<String> out = new ArrayList<>();
        for (Object o : list) {
            if (!(o instanceof String s)) {
                throw wrongType(name, o, "a list of strings");
            }
            out.add(s);
        }
        return out;
    }

    /** An integer value: a {@link Long}, or a {@link Double} without a fraction, in [min, max]. */
    static long integerValue(String name, Object v, long min, long max) {
        long value;
        if (v instanceof Long l) {
            value = l;
        } else if (v instanceof Double d && d == Math.rint(d) && Math.abs(d) < 0x1p53) {
            value = d.longValue();
        } else if (v instanceof Number) {
            throw OpenAiError.badRequest(name, name + " " + v + " must be an integer"
                    + (v instanceof java.math.BigInteger ? " in [" + min + ", " + max + "]" : ""));
        } else {
            throw wrongType(name, v, "an integer");
        }
        if (value < min || value > max) {
            throw OpenAiError.badRequest(name, name + " " + value + " must be in [" + min + ", " + max + "]");
        }
        return value;
    }

    static OpenAiError wrongType(String name, Object value, String expected) {
        return OpenAiError.badRequest(name, name + " must be " + expected + ", got " + describe(value));
    }

    /** A JSON value as a message shows it: its type and, when short, its text. */
    static String describe(Object value) {
        if (value == null) {
            return "null";
        }
        if (value instanceof String s) {
            return "the string \"" + (s.length() > 40 ? s.substring(0, 40) + "..." : s) + "\"";
        }
        if (value instanceof Map<?, ?>) {
            return "an object";
        }
        if (value instanceof List<?>) {
            return "a list";
        }
        return (value instanceof Boolean ? "the boolean " : "the number ") + value;
    }

    /** A range as a message says it; {@link Double#MIN_VALUE} is an open 0, {@link Double#MAX_VALUE} no bound. */
    private static String range(double min, double max) {
        String low = min == Double.MIN_VALUE ? "> 0" : ">= " + plain(min);
        if (max == Double.MAX_VALUE) {
            return low;
        }
        return "in " + (min == Double.MIN_VALUE ? "(0" : "[" + plain(min)) + ", " + plain(max) + "]";
    }

    private static String plain(double d) {
        return d == Math.rint(d) && Math.abs(d) < 1e15 ? Long.toString((long) d) : Double.toString(d);
    }
}
