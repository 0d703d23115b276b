package io.mcore4j.data.preprocess;

import com.google.gson.Strictness;
import com.google.gson.stream.JsonReader;
import com.google.gson.stream.JsonToken;
import io.mcore4j.json.StrictValueReader;
import java.io.IOException;
import java.io.StringReader;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Strict JSON (RFC 8259) reading for preprocessing, on Gson's streaming reader in strict mode.
 *
 * <p>{@link #stringFields(String, List)} reads only the named string fields of a top-level object and
 * skips the rest (what JSON Lines preprocessing needs); {@link #parse(String)} builds plain Java values:
 * {@code Map<String, Object>} (in the text's order), {@code List<Object>}, {@code String}, {@code Double},
 * {@code Boolean} and {@code null}. Both refuse what RFC 8259 does not allow (comments, trailing commas,
 * raw control characters in strings, NaN), strings holding a lone surrogate, and a key that appears twice
 * in one object, with a {@link JsonSyntaxException} giving the column. The array/object walk is the
 * shared {@link StrictValueReader} (module {@code mcore4j-json}).
 */
public final class StrictJson {
    private static final Pattern COLUMN = Pattern.compile("line \\d+ column (\\d+)");

    /** The shared walk with this class's strings (no lone surrogates), numbers (doubles) and errors. */
    private static final StrictValueReader VALUES = new Values(false);
    /** The same walk keeping integers apart from other numbers, as Python's json module does. */
    private static final StrictValueReader VALUES_WITH_INTEGERS = new Values(true);

    private static final class Values extends StrictValueReader {
        private final boolean integers;

        Values(boolean integers) {
            this.integers = integers;
        }

        @Override
        protected String string(JsonReader reader) throws IOException {
            return StrictJson.string(reader);
        }

        @Override
        protected Object number(JsonReader reader) throws IOException {
            if (!integers) {
                return reader.nextDouble();
            }
            String text = reader.nextString();
            if (text.indexOf('.') >= 0 || text.indexOf('e') >= 0 || text.indexOf('E') >= 0) {
                return Double.parseDouble(text);
            }
            java.math.BigInteger value = new java.math.BigInteger(text);
            return value.bitLength() < 64 ? (Object) value.longValue() : value;
        }

        @Override
        protected Object keyPosition(JsonReader reader) {
            return column(reader);
        }

        @Override
        protected RuntimeException duplicateKey(JsonReader reader, String key, Object keyColumn) {
            return new JsonSyntaxException("duplicate key \"" + key + "\"", (Integer) keyColumn);
        }

        @Override
        protected RuntimeException notAValue(JsonReader reader) throws IOException {
            return new JsonSyntaxException("expected a value, found " + describe(reader.peek()), column(reader));
        }
    }

    private StrictJson() {}

    /**
     * Parses a complete JSON text.
     *
     * @param text the JSON
     * @return the value
     * @throws JsonSyntaxException if the text is not exactly one JSON value, or repeats a key in an object
     */
    public static Object parse(String text) {
        return parse(text, VALUES);
    }

    /**
     * Parses a complete JSON text as Python's {@code json.loads} types it: numbers without a fraction or an
     * exponent are {@link Long} (or {@link java.math.BigInteger} beyond 64 bits), other numbers {@link Double}.
     *
     * @param text the JSON
     * @return the value
     * @throws JsonSyntaxException as {@link #parse(String)}
     */
    public static Object parseKeepingIntegers(String text) {
        return parse(text, VALUES_WITH_INTEGERS);
    }

    private static Object parse(String text, StrictValueReader values) {
        JsonReader reader = reader(text);
        try {
            Object value = values.read(reader);
            end(reader);
            return value;
        } catch (IOException | IllegalStateException | NumberFormatException e) {
            throw error(e);
        }
    }

    /**
     * Reads string fields of a JSON object.
     *
     * @param text a JSON object, e.g. one line of a JSON Lines file
     * @param keys names of the fields to read
     * @return the fields' values, in the order of {@code keys}
     * @throws JsonSyntaxException if the text is not one JSON object, a key is repeated, or one of
     *     {@code keys} is missing or not a string
     */
    public static String[] stringFields(String text, List<String> keys) {
        JsonReader reader = reader(text);
        String[] values = new String[keys.size()];
        try {
            if (reader.peek() != JsonToken.BEGIN_OBJECT) {
                throw new JsonSyntaxException("expected a JSON object, found " + describe(reader.peek()), column(reader));
            }
            reader.beginObject();
            List<String> seen = new ArrayList<>();
            while (reader.hasNext()) {
                int keyColumn = column(reader);
                String key = reader.nextName();
                if (seen.contains(key)) {
                    throw new JsonSyntaxException("duplicate key \"" + key + "\"", keyColumn);
                }
                seen.add(key);
                int k = keys.indexOf(key);
                if (k < 0) {
                    skip(reader);
                } else if (reader.peek() == JsonToken.STRING) {
                    values[k] = string(reader);
                } else {
                    throw new JsonSyntaxException("field \"" + key + "\" is not a string but " + describe(reader.peek()), column(reader));
                }
            }
            reader.endObject();
            end(reader);
        } catch (IOException | IllegalStateException | NumberFormatException e) {
            throw error(e);
        }
        for (int k = 0; k < values.length; k++) {
            if (values[k] == null) {
                throw new JsonSyntaxException("key \"" + keys.get(k) + "\" is missing", 1);
            }
        }
        return values;
    }

    private static JsonReader reader(String text) {
        JsonReader reader = new JsonReader(new StringReader(text));
        reader.setStrictness(Strictness.STRICT);
        return reader;
    }

    private static Object value(JsonReader reader) throws IOException {
        return VALUES.read(reader);
    }

    /** Skips a value, still refusing repeated keys and lone surrogates inside it. */
    private static void skip(JsonReader reader) throws IOException {
        value(reader);
    }

    private static String string(JsonReader reader) throws IOException {
        int column = column(reader);
        String s = reader.nextString();
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (Character.isHighSurrogate(c) && i + 1 < s.length() && Character.isLowSurrogate(s.charAt(i + 1))) {
                i++;
            } else if (Character.isSurrogate(c)) {
                throw new JsonSyntaxException(String.format("string holds a lone surrogate \\u%04X", (int) c), column);
            }
        }
        return s;
    }

    private static void end(JsonReader reader) throws IOException {
        if (reader.peek() != JsonToken.END_DOCUMENT) {
            throw new JsonSyntaxException("unexpected text after the JSON value", column(reader));
        }
    }

    private static String describe(JsonToken token) {
        return switch (token) {
            case BEGIN_ARRAY -> "an array";
            case BEGIN_OBJECT -> "an object";
            case END_DOCUMENT -> "the end of input";
            default -> "a " + token.name().toLowerCase(java.util.Locale.ROOT);
        };
    }

    /** The 1-based column where the reader stands. */
    private static int column(JsonReader reader) {
        Matcher m = COLUMN.matcher(reader.toString());
        return m.find() ? Integer.parseInt(m.group(1)) : 1;
    }

    private static JsonSyntaxException error(Exception e) {
        if (e instanceof JsonSyntaxException j) {
            return j;
        }
        String message = String.valueOf(e.getMessage());
        int newline = message.indexOf('\n');
        message = newline < 0 ? message : message.substring(0, newline);
        Matcher m = COLUMN.matcher(message);
        int column = m.find() ? Integer.parseInt(m.group(1)) : 1;
        String problem = message.startsWith("Use JsonReader.setStrictness")
                ? "malformed JSON (a literal, number or separator that strict JSON does not allow)"
                : message.replaceAll(" at line \\d+ column \\d+ path \\S*", "");
        return new JsonSyntaxException(problem, column);
    }
}
