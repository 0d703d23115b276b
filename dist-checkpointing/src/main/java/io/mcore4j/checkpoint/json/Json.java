package io.mcore4j.checkpoint.json;

/**
 * Entry points of the JSON reader and writer.
 *
 * <p>Value model: {@code null}, {@link String}, {@link Boolean}, {@link Long} (integers without
 * fraction or exponent), {@link Double} (everything else), {@link java.util.List} and
 * {@link java.util.Map} with {@code String} keys. The writer also accepts {@code Integer},
 * {@code Short}, {@code Byte} and {@code Float} and any {@code List}/{@code Map}; it writes object
 * keys in sorted order so that equal values always produce equal text. Non-finite doubles have no
 * JSON form and are refused.
 */
public final class Json {
    /** Objects and arrays nested deeper than this are refused (also catches cyclic values). */
    public static final int MAX_DEPTH = 512;

    private Json() {}

    /**
     * Parses one JSON value; nothing but whitespace may follow it.
     *
     * @param text the JSON text
     * @return the value: maps keep the order of the text and are mutable, as are lists
     * @throws JsonException naming line, column and offset of the first error
     */
    public static Object parse(String text) {
        return new JsonReader(text).readDocument();
    }

    /**
     * Writes {@code value} compactly (no whitespace).
     *
     * @param value a value of the model described in the class comment
     * @return the JSON text
     * @throws JsonException naming the path of a value JSON cannot hold
     */
    public static String write(Object value) {
        return new JsonWriter(false).write(value);
    }

    /**
     * Writes {@code value} with two-space indentation; arrays of scalars stay on one line.
     *
     * @param value a value of the model described in the class comment
     * @return the JSON text, ending without a newline
     * @throws JsonException naming the path of a value JSON cannot hold
     */
    public static String writePretty(Object value) {
        return new JsonWriter(true).write(value);
    }
}
