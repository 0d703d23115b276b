package io.mcore4j.checkpoint.json;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/** Serializes the JSON value model; object keys are sorted so output is deterministic. */
final class JsonWriter {
    private final boolean pretty;
    private final StringBuilder out = new StringBuilder();

    JsonWriter(boolean pretty) {
        this.pretty = pretty;
    }

    String write(Object value) {
        value(value, "$", 0);
        return out.toString();
    }

    private void value(Object v, String path, int depth) {
        if (depth > Json.MAX_DEPTH) {
            throw new JsonException(path + ": nesting deeper than " + Json.MAX_DEPTH + " (a cyclic value?)", -1);
        }
        if (v == null) {
            out.append("null");
        } else if (v instanceof String s) {
            string(s);
        } else if (v instanceof Boolean b) {
            out.append(b.booleanValue());
        } else if (v instanceof Long || v instanceof Integer || v instanceof Short || v instanceof Byte) {
            out.append(((Number) v).longValue());
        } else if (v instanceof Double || v instanceof Float) {
            double d = ((Number) v).doubleValue();
            if (!Double.isFinite(d)) {
                throw new JsonException(path + ": " + d + " has no JSON representation", -1);
            }
            // Double.toString always has a '.' or an exponent, so the reader gives back a Double
            out.append(Double.toString(d));
        } else if (v instanceof Map<?, ?> map) {
            object(map, path, depth);
        } else if (v instanceof List<?> list) {
            array(list, path, depth);
        } else {
            throw new JsonException(path + ": a " + v.getClass().getName()
                    + " is not a JSON value (String, Long, Double, Boolean, List, Map or null)", -1);
        }
    }

    private void object(Map<?, ?> map, String path, int depth) {
        List<String> keys = new ArrayList<>(map.size());
        for (Object k : map.keySet()) {
            if (!(k instanceof String s)) {
                throw new JsonException(path + ": object key " + k + " is a "
                        + (k == null ? "null" : k.getClass().getName()) + ", not a String", -1);
            }
            keys.add(s);
        }
        keys.sort(null);
        if (keys.isEmpty()) {
            out.append("{}");
            return;
        }
        out.append('{');
        for (int i = 0; i < keys.size(); i++) {
            if (i > 0) {
                out.append(',');
            }
            newline(depth + 1);
            string(keys.get(i));
            out.append(pretty ? ": " : ":");
            value(map.get(keys.get(i)), path + "." + keys.get(i), depth + 1);
        }
        newline(depth);
        out.append('}');
    }

    private void array(List<?> list, String path, int depth) {
        if (list.isEmpty()) {
            out.append("[]");
            return;
        }
        boolean inline = !pretty || list.stream().noneMatch(e -> e instanceof Map || e instanceof List);
        out.append('[');
        for (int i = 0; i < list.size(); i++) {
            if (i > 0) {
                out.append(pretty && inline ? ", " : ",");
            }
            if (!inline) {
                newline(depth + 1);
            }
            value(list.get(i), path + "[" + i + "]", depth + 1);
        }
        if (!inline) {
            newline(depth);
        }
        out.append(']');
    }

    private void newline(int depth) {
        if (pretty) {
            out.append('\n');
            out.append("  ".repeat(depth));
        }
    }

    private void string(String s) {
        out.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                case '\n' -> out.append("\\n");
                case '\r' -> out.append("\\r");
                case '\t' -> out.append("\\t");
                case '\b' -> out.append("\\b");
                case '\f' -> out.append("\\f");
                default -> {
                    boolean loneSurrogate = Character.isSurrogate(c) && !pairedSurrogate(s, i);
                    if (c < 0x20 || loneSurrogate) {
                        // a lone surrogate cannot be encoded in UTF-8; the escape keeps the text valid
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
                }
            }
        }
        out.append('"');
    }

    private static boolean pairedSurrogate(String s, int i) {
        char c = s.charAt(i);
        if (Character.isHighSurrogate(c)) {
            return i + 1 < s.length() && Character.isLowSurrogate(s.charAt(i + 1));
        }
        return i > 0 && Character.isHighSurrogate(s.charAt(i - 1));
    }
}
