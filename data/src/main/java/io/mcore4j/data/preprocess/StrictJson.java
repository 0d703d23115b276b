package io.mcore4j.data.preprocess;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A small, strict JSON (RFC 8259) reader, written so that the module needs no JSON library.
 *
 * <p>{@link #parse(String)} builds plain Java values: {@code Map<String, Object>} (insertion order, last
 * duplicate key wins), {@code List<Object>}, {@code String}, {@code Double}, {@code Boolean} and
 * {@code null}. {@link #stringFields(String, List)} reads only named string fields of a top-level object and
 * validates the rest without building it, which is what JSON Lines preprocessing needs. Both reject
 * anything RFC 8259 does not allow (comments, trailing commas, raw control characters in strings, lone
 * surrogate escapes, NaN) with a {@link JsonSyntaxException} giving the column.
 */
public final class StrictJson {
    private final String text;
    private int pos;

    private StrictJson(String text) {
        this.text = text;
    }

    /**
     * Parses a complete JSON text.
     *
     * @param text the JSON
     * @return the value
     * @throws JsonSyntaxException if the text is not exactly one JSON value
     */
    public static Object parse(String text) {
        StrictJson p = new StrictJson(text);
        p.skipWhitespace();
        Object value = p.value(true);
        p.expectEnd();
        return value;
    }

    /**
     * Reads string fields of a JSON object.
     *
     * @param text a JSON object, e.g. one line of a JSON Lines file
     * @param keys names of the fields to read
     * @return the fields' values, in the order of {@code keys}
     * @throws JsonSyntaxException if the text is not one JSON object, or a key is missing or not a string
     */
    public static String[] stringFields(String text, List<String> keys) {
        StrictJson p = new StrictJson(text);
        String[] values = new String[keys.size()];
        p.skipWhitespace();
        p.expect('{', "expected '{' to start an object");
        p.skipWhitespace();
        if (p.peek() == '}') {
            p.pos++;
        } else {
            while (true) {
                p.skipWhitespace();
                int keyColumn = p.pos + 1;
                String key = p.string();
                p.skipWhitespace();
                p.expect(':', "expected ':' after key \"" + key + "\"");
                p.skipWhitespace();
                int index = keys.indexOf(key);
                if (index >= 0) {
                    if (p.peek() != '"') {
                        throw new JsonSyntaxException("field \"" + key + "\" is not a string", keyColumn);
                    }
                    values[index] = p.string();
                } else {
                    p.value(false);
                }
                p.skipWhitespace();
                char c = p.next("expected ',' or '}' in object");
                if (c == '}') {
                    break;
                }
                if (c != ',') {
                    throw p.error("expected ',' or '}' in object, found " + describe(c), p.pos);
                }
            }
        }
        p.expectEnd();
        for (int k = 0; k < values.length; k++) {
            if (values[k] == null) {
                throw new JsonSyntaxException("key \"" + keys.get(k) + "\" is missing", 1);
            }
        }
        return values;
    }

    private Object value(boolean build) {
        char c = peek();
        switch (c) {
            case '{':
                return object(build);
            case '[':
                return array(build);
            case '"':
                if (build) {
                    return string();
                }
                skipString();
                return null;
            case 't':
                literal("true");
                return Boolean.TRUE;
            case 'f':
                literal("false");
                return Boolean.FALSE;
            case 'n':
                literal("null");
                return null;
            default:
                if (c == '-' || (c >= '0' && c <= '9')) {
                    return number(build);
                }
                throw error("expected a value, found " + (pos >= text.length() ? "end of input" : describe(c)), pos + 1);
        }
    }

    private Map<String, Object> object(boolean build) {
        pos++;
        Map<String, Object> map = build ? new LinkedHashMap<>() : null;
        skipWhitespace();
        if (peek() == '}') {
            pos++;
            return map;
        }
        while (true) {
            skipWhitespace();
            String key = string();
            skipWhitespace();
            expect(':', "expected ':' after key \"" + key + "\"");
            skipWhitespace();
            Object v = value(build);
            if (build) {
                map.put(key, v);
            }
            skipWhitespace();
            char c = next("expected ',' or '}' in object");
            if (c == '}') {
                return map;
            }
            if (c != ',') {
                throw error("expected ',' or '}' in object, found " + describe(c), pos);
            }
        }
    }

    private List<Object> array(boolean build) {
        pos++;
        List<Object> list = build ? new ArrayList<>() : null;
        skipWhitespace();
        if (peek() == ']') {
            pos++;
            return list;
        }
        while (true) {
            skipWhitespace();
            Object v = value(build);
            if (build) {
                list.add(v);
            }
            skipWhitespace();
            char c = next("expected ',' or ']' in array");
            if (c == ']') {
                return list;
            }
            if (c != ',') {
                throw error("expected ',' or ']' in array, found " + describe(c), pos);
            }
        }
    }

    private Double number(boolean build) {
        int start = pos;
        if (peek() == '-') {
            pos++;
        }
        if (peek() == '0') {
            pos++;
        } else if (peek() >= '1' && peek() <= '9') {
            digits();
        } else {
            throw error("expected a digit", pos + 1);
        }
        if (peek() == '.') {
            pos++;
            if (!(peek() >= '0' && peek() <= '9')) {
                throw error("expected a digit after '.'", pos + 1);
            }
            digits();
        }
        if (peek() == 'e' || peek() == 'E') {
            pos++;
            if (peek() == '+' || peek() == '-') {
                pos++;
            }
            if (!(peek() >= '0' && peek() <= '9')) {
                throw error("expected a digit in exponent", pos + 1);
            }
            digits();
        }
        return build ? Double.valueOf(text.substring(start, pos)) : null;
    }

    private void digits() {
        while (peek() >= '0' && peek() <= '9') {
            pos++;
        }
    }

    private void literal(String word) {
        if (!text.startsWith(word, pos)) {
            throw error("expected " + word, pos + 1);
        }
        pos += word.length();
    }

    /** Reads a string starting at the opening quote; the common no-escape case is one substring. */
    private String string() {
        int start = pos;
        expect('"', "expected '\"' to start a string");
        int runStart = pos;
        StringBuilder sb = null;
        while (true) {
            if (pos >= text.length()) {
                throw error("unterminated string", start + 1);
            }
            char c = text.charAt(pos);
            if (c == '"') {
                String run = text.substring(runStart, pos);
                pos++;
                return sb == null ? run : sb.append(run).toString();
            }
            if (c < 0x20) {
                throw error("raw control character " + describe(c) + " in string", pos + 1);
            }
            if (c != '\\') {
                pos++;
                continue;
            }
            if (sb == null) {
                sb = new StringBuilder();
            }
            sb.append(text, runStart, pos);
            pos++;
            escape(sb);
            runStart = pos;
        }
    }

    private void skipString() {
        int start = pos;
        pos++;
        while (true) {
            if (pos >= text.length()) {
                throw error("unterminated string", start + 1);
            }
            char c = text.charAt(pos);
            if (c == '"') {
                pos++;
                return;
            }
            if (c < 0x20) {
                throw error("raw control character " + describe(c) + " in string", pos + 1);
            }
            pos++;
            if (c == '\\') {
                escape(null);
            }
        }
    }

    /** Decodes the escape after a backslash, appending it to {@code sb} when not null. */
    private void escape(StringBuilder sb) {
        int column = pos;
        char e = next("unterminated escape");
        char decoded;
        switch (e) {
            case '"' -> decoded = '"';
            case '\\' -> decoded = '\\';
            case '/' -> decoded = '/';
            case 'b' -> decoded = '\b';
            case 'f' -> decoded = '\f';
            case 'n' -> decoded = '\n';
            case 'r' -> decoded = '\r';
            case 't' -> decoded = '\t';
            case 'u' -> {
                char unit = hex4();
                if (Character.isHighSurrogate(unit)) {
                    if (!text.startsWith("\\u", pos)) {
                        throw error("high surrogate \\u" + hex(unit) + " is not followed by a low surrogate escape", column);
                    }
                    pos += 2;
                    char low = hex4();
                    if (!Character.isLowSurrogate(low)) {
                        throw error("high surrogate \\u" + hex(unit) + " is followed by \\u" + hex(low) + ", not a low surrogate", column);
                    }
                    if (sb != null) {
                        sb.append(unit).append(low);
                    }
                    return;
                }
                if (Character.isLowSurrogate(unit)) {
                    throw error("lone low surrogate \\u" + hex(unit), column);
                }
                decoded = unit;
            }
            default -> throw error("invalid escape \\" + e, column);
        }
        if (sb != null) {
            sb.append(decoded);
        }
    }

    private char hex4() {
        if (pos + 4 > text.length()) {
            throw error("truncated \\u escape", pos + 1);
        }
        int v = 0;
        for (int k = 0; k < 4; k++) {
            int d = Character.digit(text.charAt(pos + k), 16);
            if (d < 0 || text.charAt(pos + k) > 'f') {
                throw error("invalid hex digit " + describe(text.charAt(pos + k)) + " in \\u escape", pos + k + 1);
            }
            v = v * 16 + d;
        }
        pos += 4;
        return (char) v;
    }

    private static String hex(char c) {
        return String.format("%04X", (int) c);
    }

    private void skipWhitespace() {
        while (pos < text.length()) {
            char c = text.charAt(pos);
            if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
                return;
            }
            pos++;
        }
    }

    private char peek() {
        return pos < text.length() ? text.charAt(pos) : '\0';
    }

    private char next(String problemAtEnd) {
        if (pos >= text.length()) {
            throw error(problemAtEnd + ", found end of input", pos + 1);
        }
        return text.charAt(pos++);
    }

    private void expect(char c, String problem) {
        if (pos >= text.length() || text.charAt(pos) != c) {
            throw error(problem + ", found " + (pos >= text.length() ? "end of input" : describe(text.charAt(pos))), pos + 1);
        }
        pos++;
    }

    private void expectEnd() {
        skipWhitespace();
        if (pos < text.length()) {
            throw error("unexpected " + describe(text.charAt(pos)) + " after the JSON value", pos + 1);
        }
    }

    private static String describe(char c) {
        return c < 0x20 || c == 0x7F ? "U+" + hex(c) : "'" + c + "'";
    }

    private static JsonSyntaxException error(String problem, int column) {
        return new JsonSyntaxException(problem, column);
    }
}
