package io.mcore4j.json;

import com.google.gson.stream.JsonReader;
import java.io.IOException;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Reads one JSON value from a Gson {@link JsonReader} into plain Java values: {@code Map<String,
 * Object>} (a mutable {@link LinkedHashMap} in the text's order), {@code List<Object>} (a mutable
 * {@link ArrayList}), {@link Boolean}, {@code null}, and whatever {@link #string} and {@link #number}
 * make of strings and numbers. A key that appears twice in one object is refused with the exception
 * {@link #duplicateKey} builds.
 *
 * <p>The reader's strictness and nesting limit are the caller's: this class only walks the tokens. Gson's
 * own errors ({@link IOException}, {@link IllegalStateException}, {@link NumberFormatException}) pass
 * through unchanged for the caller to translate. Subclasses are stateless hooks; one instance can read
 * any number of values, also from several threads at once.
 */
public abstract class StrictValueReader {
    /** For subclasses. */
    protected StrictValueReader() {}

    /**
     * Reads the value at the reader's position, and everything nested in it.
     *
     * @param reader a reader standing before a value
     * @return the value
     * @throws IOException if Gson finds malformed JSON or the input fails
     * @throws RuntimeException what a hook throws: a repeated key, a refused string or number, or a token
     *     where a value should be
     */
    public final Object read(JsonReader reader) throws IOException {
        switch (reader.peek()) {
            case BEGIN_ARRAY -> {
                List<Object> list = new ArrayList<>();
                reader.beginArray();
                while (reader.hasNext()) {
                    list.add(read(reader));
                }
                reader.endArray();
                return list;
            }
            case BEGIN_OBJECT -> {
                Map<String, Object> map = new LinkedHashMap<>();
                reader.beginObject();
                while (reader.hasNext()) {
                    Object position = keyPosition(reader);
                    String key = reader.nextName();
                    if (map.containsKey(key)) {
                        throw duplicateKey(reader, key, position);
                    }
                    map.put(key, read(reader));
                }
                reader.endObject();
                return map;
            }
            case STRING -> {
                return string(reader);
            }
            case NUMBER -> {
                return number(reader);
            }
            case BOOLEAN -> {
                return reader.nextBoolean();
            }
            case NULL -> {
                reader.nextNull();
                return null;
            }
            default -> throw notAValue(reader);
        }
    }

    /**
     * Reads the string at the reader's position; the default takes it as Gson gives it.
     *
     * @param reader a reader standing before a string
     * @return the string's value
     * @throws IOException if Gson finds malformed JSON
     */
    protected String string(JsonReader reader) throws IOException {
        return reader.nextString();
    }

    /**
     * Reads the number at the reader's position.
     *
     * @param reader a reader standing before a number
     * @return the number's value
     * @throws IOException if Gson finds malformed JSON
     */
    protected abstract Object number(JsonReader reader) throws IOException;

    /**
     * Notes where a key starts, before it is read, for {@link #duplicateKey}; the default notes nothing.
     *
     * @param reader a reader standing before an object's key
     * @return what {@link #duplicateKey} gets as {@code position} (may be {@code null})
     */
    protected Object keyPosition(JsonReader reader) {
        return null;
    }

    /**
     * The error for a key that appears twice in one object.
     *
     * @param reader the reader, standing just after the repeated key
     * @param key the key
     * @param position what {@link #keyPosition} returned before the key was read
     * @return the exception {@link #read} throws
     */
    protected abstract RuntimeException duplicateKey(JsonReader reader, String key, Object position);

    /**
     * The error for a token where a value should be (the end of the input, a name, a closing bracket).
     *
     * @param reader the reader, standing before that token
     * @return the exception {@link #read} throws
     * @throws IOException if peeking at the token fails
     */
    protected abstract RuntimeException notAValue(JsonReader reader) throws IOException;
}
