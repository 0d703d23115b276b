package io.mcore4j.samples.pretrain;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/**
 * Megatron's per-layer patterns (of {@code --window-attn-skip-freq} here): a Python list
 * expression over integers, such as {@code "([1]*3+[0]*1)*3"}, which Megatron evaluates with Python after
 * checking it holds only digits, commas, brackets, parentheses, {@code +} and {@code *}. This evaluates the same
 * expressions: list literals, {@code +} concatenation, repetition by an integer on either side, parentheses.
 */
final class LayerPatternExpression {
    private final String flag;
    private final String text;
    private int at;

    private LayerPatternExpression(String flag, String text) {
        this.flag = flag;
        this.text = text.replace(" ", "");
    }

    /**
     * @param flag the flag, for errors
     * @param text the expression
     * @return its list
     * @throws IllegalArgumentException naming the flag and the expression where it is not such an expression
     */
    static List<Integer> evaluate(String flag, String text) {
        LayerPatternExpression e = new LayerPatternExpression(flag, text);
        Object value = e.sum();
        if (e.at != e.text.length() || !(value instanceof List<?>)) {
            throw e.error();
        }
        @SuppressWarnings("unchecked")
        List<Integer> list = (List<Integer>) value;
        return list;
    }

    /** sum := product ('+' product)* */
    private Object sum() {
        Object left = product();
        while (peek('+')) {
            at++;
            Object right = product();
            if (!(left instanceof List<?> a) || !(right instanceof List<?> b)) {
                throw error();
            }
            List<Object> joined = new ArrayList<>(a);
            joined.addAll(b);
            left = joined;
        }
        return left;
    }

    /** product := atom ('*' atom)*, a list times an integer either way round */
    private Object product() {
        Object left = atom();
        while (peek('*')) {
            at++;
            Object right = atom();
            if (left instanceof List<?> list && right instanceof Integer n) {
                left = repeat(list, n);
            } else if (left instanceof Integer n && right instanceof List<?> list) {
                left = repeat(list, n);
            } else if (left instanceof Integer a && right instanceof Integer b) {
                left = a * b;
            } else {
                throw error();
            }
        }
        return left;
    }

    /** atom := integer | '[' (integer (',' integer)*)? ']' | '(' sum ')' */
    private Object atom() {
        if (peek('(')) {
            at++;
            Object inner = sum();
            expect(')');
            return inner;
        }
        if (peek('[')) {
            at++;
            List<Object> items = new ArrayList<>();
            while (!peek(']')) {
                items.add(integer());
                if (!peek(',')) {
                    break;
                }
                at++;
            }
            expect(']');
            return items;
        }
        return integer();
    }

    private Integer integer() {
        int start = at;
        while (at < text.length() && Character.isDigit(text.charAt(at))) {
            at++;
        }
        if (start == at || at - start > 6) {
            throw error();
        }
        return Integer.parseInt(text.substring(start, at));
    }

    private static List<Object> repeat(List<?> list, int times) {
        List<Object> out = new ArrayList<>();
        for (int i = 0; i < times; i++) {
            out.addAll(list);
        }
        return Collections.unmodifiableList(out);
    }

    private boolean peek(char c) {
        return at < text.length() && text.charAt(at) == c;
    }

    private void expect(char c) {
        if (!peek(c)) {
            throw error();
        }
        at++;
    }

    private IllegalArgumentException error() {
        return new IllegalArgumentException(flag + " " + text + ": expected an integer or a list expression of integers"
                + " such as \"([1]*3+[0]*1)*3\" (lists, +, * and parentheses)");
    }
}
