package io.mcore4j.data.chat;

import java.math.BigDecimal;
import java.math.BigInteger;
import java.math.MathContext;
import java.math.RoundingMode;
import java.util.Iterator;
import java.util.Map;

/**
 * Python's text forms of the JSON values a chat template sees: {@code json.dumps} as transformers' {@code tojson}
 * filter calls it ({@code ensure_ascii=False}, {@code ", "} and {@code ": "} separators, or {@code ","} and an
 * indent), {@code str()} for the {@code string} filter and {@code repr()} inside containers. Integers are
 * {@link Long} or {@link BigInteger} and other numbers {@link Double}, as {@link ChatJson} reads them, so that
 * {@code 2} prints as {@code 2} and {@code 1.5e-05} as {@code 1.5e-05}, as Python prints them.
 */
final class PythonValues {
    private PythonValues() {}

    /**
     * @param value a JSON value (maps, lists, strings, numbers, booleans, null)
     * @param indent spaces per level, or null for one line
     * @param sortKeys sort each object's keys
     * @return {@code json.dumps(value, ensure_ascii=False, indent=indent, sort_keys=sortKeys)}
     */
    static String json(Object value, Integer indent, boolean sortKeys) {
        StringBuilder out = new StringBuilder();
        json(value, indent, sortKeys, 0, out);
        return out.toString();
    }

    private static void json(Object value, Integer indent, boolean sortKeys, int depth, StringBuilder out) {
        if (value instanceof Map<?, ?> map) {
            Iterator<? extends Map.Entry<?, ?>> entries = (sortKeys ? new java.util.TreeMap<>(stringKeys(map)) : map)
                    .entrySet().iterator();
            container(out, '{', '}', indent, depth, entries, e -> {
                quote(String.valueOf(e.getKey()), out);
                out.append(": ");
                json(e.getValue(), indent, sortKeys, depth + 1, out);
            });
        } else if (value instanceof Iterable<?> list) {
            container(out, '[', ']', indent, depth, list.iterator(), v -> json(v, indent, sortKeys, depth + 1, out));
        } else if (value instanceof CharSequence s) {
            quote(s.toString(), out);
        } else {
            out.append(value == null ? "null" : value instanceof Boolean b ? (b ? "true" : "false") : number(value));
        }
    }

    private static Map<String, Object> stringKeys(Map<?, ?> map) {
        Map<String, Object> out = new java.util.LinkedHashMap<>();
        map.forEach((k, v) -> out.put(String.valueOf(k), v));
        return out;
    }

    private static <T> void container(StringBuilder out, char open, char close, Integer indent, int depth,
                                      Iterator<T> items, java.util.function.Consumer<T> item) {
        out.append(open);
        if (!items.hasNext()) {
            out.append(close);
            return;
        }
        boolean first = true;
        while (items.hasNext()) {
            T next = items.next();
            out.append(first ? "" : indent == null ? ", " : ",");
            if (indent != null) {
                out.append('\n').append(" ".repeat(indent * (depth + 1)));
            }
            item.accept(next);
            first = false;
        }
        if (indent != null) {
            out.append('\n').append(" ".repeat(indent * depth));
        }
        out.append(close);
    }

    /** A JSON string as json.dumps writes it with ensure_ascii=False. */
    private static void quote(String s, StringBuilder out) {
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
                    if (c < 0x20) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
                }
            }
        }
        out.append('"');
    }

    /**
     * @param value a number
     * @return Python's {@code repr}: integers in decimal, floats as the shortest text that reads back to them,
     *     in fixed notation for decimal exponents from -4 to 15 and as {@code 1.5e-05} otherwise
     */
    static String number(Object value) {
        if (value instanceof Long || value instanceof Integer || value instanceof BigInteger || value instanceof Short) {
            return value.toString();
        }
        if (!(value instanceof Number n)) {
            throw new IllegalArgumentException("not a number: " + value);
        }
        double d = n.doubleValue();
        if (Double.isNaN(d)) {
            return "NaN";
        }
        if (Double.isInfinite(d)) {
            return d > 0 ? "Infinity" : "-Infinity";
        }
        if (d == 0) {
            return 1 / d < 0 ? "-0.0" : "0.0";
        }
        BigDecimal shortest = shortest(d);
        String digits = shortest.unscaledValue().abs().toString();
        int exponent = digits.length() - 1 - shortest.scale(); // of the first digit
        String sign = d < 0 ? "-" : "";
        if (exponent >= -4 && exponent < 16) {
            BigDecimal plain = shortest.abs();
            String text = plain.toPlainString();
            return sign + (text.contains(".") ? text : text + ".0");
        }
        String mantissa = digits.length() == 1 ? digits : digits.charAt(0) + "." + digits.substring(1);
        return sign + mantissa + "e" + (exponent < 0 ? "-" : "+") + (Math.abs(exponent) < 10 ? "0" : "") + Math.abs(exponent);
    }

    /** The fewest significant digits that read back to {@code d} (Python's repr), trailing zeros dropped. */
    private static BigDecimal shortest(double d) {
        BigDecimal exact = new BigDecimal(d);
        for (int precision = 1; precision <= 17; precision++) {
            BigDecimal candidate = exact.round(new MathContext(precision, RoundingMode.HALF_EVEN));
            if (candidate.doubleValue() == d) {
                return candidate.stripTrailingZeros();
            }
        }
        return exact.stripTrailingZeros();
    }

    /**
     * @param value a value
     * @return Python's {@code str()}: a string itself, else {@link #repr}
     */
    static String str(Object value) {
        return value instanceof CharSequence s ? s.toString() : repr(value);
    }

    /**
     * @param value a value
     * @return Python's {@code repr()}: {@code 'text'}, {@code True}, {@code None}, {@code {'a': 1}}, {@code [1, 2]}
     */
    static String repr(Object value) {
        if (value == null) {
            return "None";
        }
        if (value instanceof Boolean b) {
            return b ? "True" : "False";
        }
        if (value instanceof Number) {
            return number(value);
        }
        if (value instanceof CharSequence s) {
            String text = s.toString();
            boolean doubleQuotes = text.contains("'") && !text.contains("\"");
            char q = doubleQuotes ? '"' : '\'';
            StringBuilder out = new StringBuilder().append(q);
            for (int i = 0; i < text.length(); i++) {
                char c = text.charAt(i);
                switch (c) {
                    case '\\' -> out.append("\\\\");
                    case '\n' -> out.append("\\n");
                    case '\r' -> out.append("\\r");
                    case '\t' -> out.append("\\t");
                    default -> out.append(c == q ? "\\" + c : c < 0x20 || c == 0x7f ? String.format("\\x%02x", (int) c)
                            : String.valueOf(c));
                }
            }
            return out.append(q).toString();
        }
        StringBuilder out = new StringBuilder();
        if (value instanceof Map<?, ?> map) {
            out.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> e : map.entrySet()) {
                out.append(first ? "" : ", ").append(repr(e.getKey())).append(": ").append(repr(e.getValue()));
                first = false;
            }
            return out.append('}').toString();
        }
        if (value instanceof Iterable<?> list) {
            out.append('[');
            boolean first = true;
            for (Object v : list) {
                out.append(first ? "" : ", ").append(repr(v));
                first = false;
            }
            return out.append(']').toString();
        }
        return value.toString();
    }
}
