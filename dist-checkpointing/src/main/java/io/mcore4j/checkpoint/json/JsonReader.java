package io.mcore4j.checkpoint.json;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Recursive-descent parser for RFC 8259 JSON. Strict: no comments, trailing commas, leading zeros,
 * raw control characters in strings, duplicate object keys or trailing content.
 */
final class JsonReader {
    private final String text;
    private int pos;

    JsonReader(String text) {
        if (text == null) {
            throw new JsonException("JSON text is null", 0);
        }
        this.text = text;
    }

    Object readDocument() {
        skipWhitespace();
        Object v = value(0);
        skipWhitespace();
        if (pos < text.length()) {
            throw error("unexpected " + describe(pos) + " after the end of the JSON value");
        }
        return v;
    }

    private Object value(int depth) {
        if (depth > Json.MAX_DEPTH) {
            throw error("nesting deeper than " + Json.MAX_DEPTH);
        }
        if (pos >= text.length()) {
            throw error("unexpected end of input, expected a value");
        }
        char c = text.charAt(pos);
        return switch (c) {
            case '{' -> object(depth);
            case '[' -> array(depth);
            case '"' -> string();
            case 't' -> literal("true", Boolean.TRUE);
            case 'f' -> literal("false", Boolean.FALSE);
            case 'n' -> literal("null", null);
            default -> {
                if (c == '-' || (c >= '0' && c <= '9')) {
                    yield number();
                }
                throw error("unexpected " + describe(pos) + ", expected a value");
            }
        };
    }

    private Map<String, Object> object(int depth) {
        pos++; // '{'
        Map<String, Object> map = new LinkedHashMap<>();
        skipWhitespace();
        if (peek() == '}') {
            pos++;
            return map;
        }
        while (true) {
            skipWhitespace();
            if (peek() != '"') {
                throw error("unexpected " + describe(pos) + ", expected a string key");
            }
            int keyAt = pos;
            String key = string();
            skipWhitespace();
            expect(':');
            skipWhitespace();
            Object v = value(depth + 1);
            if (map.containsKey(key)) {
                pos = keyAt;
                throw error("duplicate key \"" + key + "\"");
            }
            map.put(key, v);
            skipWhitespace();
            char c = peek();
            if (c == ',') {
                pos++;
            } else if (c == '}') {
                pos++;
                return map;
            } else {
                throw error("unexpected " + describe(pos) + ", expected ',' or '}'");
            }
        }
    }

    private List<Object> array(int depth) {
        pos++; // '['
        List<Object> list = new ArrayList<>();
        skipWhitespace();
        if (peek() == ']') {
            pos++;
            return list;
        }
        while (true) {
            skipWhitespace();
            list.add(value(depth + 1));
            skipWhitespace();
            char c = peek();
            if (c == ',') {
                pos++;
            } else if (c == ']') {
                pos++;
                return list;
            } else {
                throw error("unexpected " + describe(pos) + ", expected ',' or ']'");
            }
        }
    }

    private String string() {
        pos++; // opening quote
        StringBuilder b = new StringBuilder();
        while (true) {
            if (pos >= text.length()) {
                throw error("unterminated string");
            }
            char c = text.charAt(pos);
            if (c == '"') {
                pos++;
                return b.toString();
            }
            if (c < 0x20) {
                throw error("raw control character U+" + String.format("%04X", (int) c) + " in a string; it must be escaped");
            }
            if (c != '\\') {
                b.append(c);
                pos++;
                continue;
            }
            pos++;
            if (pos >= text.length()) {
                throw error("unterminated escape sequence");
            }
            char e = text.charAt(pos);
            switch (e) {
                case '"' -> b.append('"');
                case '\\' -> b.append('\\');
                case '/' -> b.append('/');
                case 'b' -> b.append('\b');
                case 'f' -> b.append('\f');
                case 'n' -> b.append('\n');
                case 'r' -> b.append('\r');
                case 't' -> b.append('\t');
                case 'u' -> {
                    if (pos + 5 > text.length()) {
                        throw error("truncated \\u escape");
                    }
                    int code = 0;
                    for (int i = 1; i <= 4; i++) {
                        int digit = Character.digit(text.charAt(pos + i), 16);
                        if (digit < 0) {
                            pos += i;
                            throw error("invalid hex digit " + describe(pos) + " in a \\u escape");
                        }
                        code = code * 16 + digit;
                    }
                    b.append((char) code);
                    pos += 4;
                }
                default -> throw error("invalid escape \\" + e);
            }
            pos++;
        }
    }

    private Object number() {
        int start = pos;
        boolean integral = true;
        if (peek() == '-') {
            pos++;
        }
        if (peek() == '0') {
            pos++;
            if (isDigit(peek())) {
                throw error("leading zero in a number");
            }
        } else if (isDigit(peek())) {
            digits();
        } else {
            throw error("unexpected " + describe(pos) + ", expected a digit");
        }
        if (peek() == '.') {
            integral = false;
            pos++;
            if (!isDigit(peek())) {
                throw error("unexpected " + describe(pos) + ", expected a digit after the decimal point");
            }
            digits();
        }
        if (peek() == 'e' || peek() == 'E') {
            integral = false;
            pos++;
            if (peek() == '+' || peek() == '-') {
                pos++;
            }
            if (!isDigit(peek())) {
                throw error("unexpected " + describe(pos) + ", expected a digit in the exponent");
            }
            digits();
        }
        String literal = text.substring(start, pos);
        if (integral) {
            try {
                return Long.parseLong(literal);
            } catch (NumberFormatException e) {
                pos = start;
                throw error("integer " + literal + " does not fit in a long");
            }
        }
        double d = Double.parseDouble(literal);
        if (Double.isInfinite(d)) {
            pos = start;
            throw error("number " + literal + " overflows a double");
        }
        return d;
    }

    private void digits() {
        while (isDigit(peek())) {
            pos++;
        }
    }

    private static boolean isDigit(char c) {
        return c >= '0' && c <= '9';
    }

    private Object literal(String word, Object value) {
        if (!text.startsWith(word, pos)) {
            throw error("unexpected " + describe(pos) + ", expected a value");
        }
        pos += word.length();
        return value;
    }

    private void expect(char c) {
        if (peek() != c) {
            throw error("unexpected " + describe(pos) + ", expected '" + c + "'");
        }
        pos++;
    }

    /** The current character, or NUL at the end (NUL cannot appear outside a string in valid JSON). */
    private char peek() {
        return pos < text.length() ? text.charAt(pos) : '\0';
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

    private String describe(int at) {
        if (at >= text.length()) {
            return "end of input";
        }
        char c = text.charAt(at);
        return c < 0x20 || c > 0x7e ? String.format("character U+%04X", (int) c) : "'" + c + "'";
    }

    private JsonException error(String what) {
        int line = 1;
        int lineStart = 0;
        for (int i = 0; i < pos && i < text.length(); i++) {
            if (text.charAt(i) == '\n') {
                line++;
                lineStart = i + 1;
            }
        }
        return new JsonException("JSON error at line " + line + ", column " + (pos - lineStart + 1)
                + " (offset " + pos + "): " + what, pos);
    }
}
