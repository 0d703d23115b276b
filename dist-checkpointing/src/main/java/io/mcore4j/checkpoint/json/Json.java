package io.mcore4j.checkpoint.json;

import com.google.gson.FormattingStyle;
import com.google.gson.Strictness;
import com.google.gson.stream.JsonReader;
import com.google.gson.stream.JsonToken;
import com.google.gson.stream.JsonWriter;
import io.mcore4j.json.StrictValueReader;
import java.io.IOException;
import java.io.StringReader;
import java.io.StringWriter;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * JSON for checkpoint metadata and safetensors headers, on Gson's streaming reader and writer in
 * strict mode (RFC 8259: no comments, trailing commas, NaN or raw control characters).
 *
 * <p>Value model: {@code null}, {@link String}, {@link Boolean}, {@link Long} (integers without
 * fraction or exponent), {@link Double} (everything else), {@link java.util.List} and
 * {@link java.util.Map} with {@code String} keys. The writer also accepts {@code Integer},
 * {@code Short}, {@code Byte} and {@code Float} and any {@code List}/{@code Map}; it writes object
 * keys in sorted order so that equal values always produce equal text. Non-finite doubles have no
 * JSON form and are refused. A key that appears twice in one object is refused, naming the key.
 */
public final class Json {
    /** Objects and arrays nested deeper than this are refused (also catches cyclic values). */
    public static final int MAX_DEPTH = 512;

    private static final Pattern LOCATION = Pattern.compile("line (\\d+) column (\\d+)");

    private Json() {}

    /**
     * Parses one JSON value; nothing but whitespace may follow it.
     *
     * @param text the JSON text
     * @return the value: maps keep the order of the text and are mutable, as are lists
     * @throws JsonException naming line and column (and {@link JsonException#offset()}) of the
     *     first error, or the key that appears twice in one object
     */
    public static Object parse(String text) {
        JsonReader reader = new JsonReader(new StringReader(text));
        reader.setStrictness(Strictness.STRICT);
        reader.setNestingLimit(MAX_DEPTH);
        try {
            Object value = read(reader, text);
            if (reader.peek() != JsonToken.END_DOCUMENT) {
                throw error(text, reader.toString(), "unexpected text after the end of the JSON value");
            }
            return value;
        } catch (JsonException e) {
            throw e;
        } catch (IOException | IllegalStateException | NumberFormatException e) {
            String message = String.valueOf(e.getMessage());
            int newline = message.indexOf('\n');
            message = newline < 0 ? message : message.substring(0, newline);
            String problem = message;
            if (message.startsWith("Use JsonReader.setStrictness")) {
                problem = "malformed JSON (a literal, number or separator that strict JSON does not allow)";
            } else if (message.contains("Nesting limit")) {
                problem = "nesting deeper than " + MAX_DEPTH + ": " + message;
            }
            throw error(text, message, problem);
        }
    }

    private static Object read(JsonReader reader, String text) throws IOException {
        return new StrictValueReader() {
            @Override
            protected Object number(JsonReader r) throws IOException {
                String where = r.toString();
                String literal = r.nextString();
                return Json.number(literal, text, where);
            }

            @Override
            protected RuntimeException duplicateKey(JsonReader r, String key, Object position) {
                return error(text, r.toString(), "duplicate key \"" + key + "\" in one object");
            }

            @Override
            protected RuntimeException notAValue(JsonReader r) throws IOException {
                return error(text, r.toString(), "expected a value, found " + r.peek());
            }
        }.read(reader);
    }

    private static Object number(String literal, String text, String where) {
        if (literal.indexOf('.') < 0 && literal.indexOf('e') < 0 && literal.indexOf('E') < 0) {
            try {
                return Long.parseLong(literal);
            } catch (NumberFormatException e) {
                throw error(text, where, "integer " + literal + " does not fit in a long");
            }
        }
        double d = Double.parseDouble(literal);
        if (Double.isInfinite(d)) {
            throw error(text, where, "number " + literal + " overflows a double");
        }
        return d;
    }

    /** A parse error at the position {@code location} names ("line L column C", Gson's form). */
    private static JsonException error(String text, String location, String problem) {
        Matcher m = LOCATION.matcher(location);
        if (!m.find()) {
            return new JsonException("invalid JSON: " + problem, -1);
        }
        int line = Integer.parseInt(m.group(1));
        int column = Integer.parseInt(m.group(2));
        long offset = 0;
        for (int l = 1; l < line && offset >= 0; l++) {
            offset = text.indexOf('\n', (int) offset) + 1;
            offset = offset == 0 ? -1 : offset;
        }
        offset = offset < 0 ? -1 : Math.min(text.length(), offset + column - 1);
        String what = problem.replaceAll(" at line \\d+ column \\d+ path \\S*", "");
        return new JsonException("invalid JSON at line " + line + ", column " + column + ": " + what, offset);
    }

    /**
     * Writes {@code value} compactly (no whitespace).
     *
     * @param value a value of the model described in the class comment
     * @return the JSON text
     * @throws JsonException naming the path of a value JSON cannot hold
     */
    public static String write(Object value) {
        return write(value, FormattingStyle.COMPACT);
    }

    /**
     * Writes {@code value} with two-space indentation, one element or member per line.
     *
     * @param value a value of the model described in the class comment
     * @return the JSON text, ending without a newline
     * @throws JsonException naming the path of a value JSON cannot hold
     */
    public static String writePretty(Object value) {
        return write(value, FormattingStyle.PRETTY.withIndent("  ").withNewline("\n"));
    }

    private static String write(Object value, FormattingStyle style) {
        StringWriter out = new StringWriter();
        try (JsonWriter writer = new JsonWriter(out)) {
            writer.setFormattingStyle(style);
            writer.setStrictness(Strictness.STRICT);
            writer.setHtmlSafe(false);
            value(writer, value, "$", 0);
        } catch (IOException e) {
            throw new IllegalStateException("writing JSON to memory failed", e);
        }
        return out.toString();
    }

    private static void value(JsonWriter w, Object v, String path, int depth) throws IOException {
        if (depth > MAX_DEPTH) {
            throw new JsonException(path + ": nesting deeper than " + MAX_DEPTH + " (a cyclic value?)", -1);
        }
        if (v == null) {
            w.nullValue();
        } else if (v instanceof String s) {
            string(w, s);
        } else if (v instanceof Boolean b) {
            w.value(b.booleanValue());
        } else if (v instanceof Long || v instanceof Integer || v instanceof Short || v instanceof Byte) {
            w.value(((Number) v).longValue());
        } else if (v instanceof Double || v instanceof Float) {
            double d = ((Number) v).doubleValue();
            if (!Double.isFinite(d)) {
                throw new JsonException(path + ": " + d + " has no JSON representation", -1);
            }
            // Double.toString always has a '.' or an exponent, so the reader gives back a Double
            w.value(d);
        } else if (v instanceof Map<?, ?> map) {
            List<String> keys = new ArrayList<>(map.size());
            for (Object k : map.keySet()) {
                if (!(k instanceof String s)) {
                    throw new JsonException(path + ": object key " + k + " is a "
                            + (k == null ? "null" : k.getClass().getName()) + ", not a String", -1);
                }
                keys.add(s);
            }
            keys.sort(null);
            w.beginObject();
            for (String k : keys) {
                w.name(k);
                value(w, map.get(k), path + "." + k, depth + 1);
            }
            w.endObject();
        } else if (v instanceof List<?> list) {
            w.beginArray();
            for (int i = 0; i < list.size(); i++) {
                value(w, list.get(i), path + "[" + i + "]", depth + 1);
            }
            w.endArray();
        } else {
            throw new JsonException(path + ": a " + v.getClass().getName()
                    + " is not a JSON value (String, Long, Double, Boolean, List, Map or null)", -1);
        }
    }

    /** Gson writes lone surrogates as they are, which UTF-8 cannot encode: those are escaped. */
    private static void string(JsonWriter w, String s) throws IOException {
        if (!hasLoneSurrogate(s)) {
            w.value(s);
            return;
        }
        StringWriter quoted = new StringWriter();
        try (JsonWriter one = new JsonWriter(quoted)) {
            one.setHtmlSafe(false);
            one.value(s);
        }
        StringBuilder b = new StringBuilder();
        String q = quoted.toString();
        for (int i = 0; i < q.length(); i++) {
            char c = q.charAt(i);
            b.append(Character.isSurrogate(c) && !paired(q, i) ? String.format("\\u%04x", (int) c) : String.valueOf(c));
        }
        w.jsonValue(b.toString());
    }

    private static boolean hasLoneSurrogate(String s) {
        for (int i = 0; i < s.length(); i++) {
            if (Character.isSurrogate(s.charAt(i)) && !paired(s, i)) {
                return true;
            }
        }
        return false;
    }

    private static boolean paired(String s, int i) {
        char c = s.charAt(i);
        if (Character.isHighSurrogate(c)) {
            return i + 1 < s.length() && Character.isLowSurrogate(s.charAt(i + 1));
        }
        return i > 0 && Character.isHighSurrogate(s.charAt(i - 1));
    }
}
