package io.mcore4j.models;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/**
 * Which layers of a model have a mixture of experts instead of a dense MLP (Megatron's {@code moe_layer_freq}):
 * every {@code frequency}-th layer starting with layer 0, or an explicit list with one entry per layer, 1 for a
 * mixture-of-experts layer and 0 for a dense one.
 *
 * @param frequency with no list: every this-many-th layer (1 = all), at least 1; 0 with a list
 * @param layers the explicit 0/1 entries, one per layer (unmodifiable), or empty with a frequency
 */
public record MoeLayerPattern(int frequency, List<Integer> layers) {
    /** Longest list {@link #parse} builds: far more layers than any model has, few enough to hold. */
    static final int MAX_ENTRIES = 1 << 20;

    /**
     * Checks that exactly one form is given.
     *
     * @throws IllegalArgumentException naming the values
     */
    public MoeLayerPattern {
        layers = layers == null ? List.of() : Collections.unmodifiableList(new ArrayList<>(layers));
        if (layers.isEmpty() == (frequency == 0)) {
            throw new IllegalArgumentException("a MoE layer pattern is a frequency >= 1 or a non-empty list of 0 and 1,"
                    + " got frequency " + frequency + " and " + layers);
        }
        if (frequency < 0) {
            throw new IllegalArgumentException("MoE layer frequency " + frequency + " must be at least 1");
        }
        for (Integer v : layers) {
            if (v == null || v != 0 && v != 1) {
                throw new IllegalArgumentException("MoE layer pattern " + layers + " may hold 0 (dense) and 1 (experts) only");
            }
        }
    }

    /**
     * @param frequency every this-many-th layer is MoE, from layer 0 (1 = every layer)
     * @return the pattern
     * @throws IllegalArgumentException if {@code frequency < 1}
     */
    public static MoeLayerPattern every(int frequency) {
        if (frequency < 1) {
            throw new IllegalArgumentException("MoE layer frequency " + frequency + " must be at least 1");
        }
        return new MoeLayerPattern(frequency, List.of());
    }

    /**
     * @param layers one entry per layer: 1 for experts, 0 for a dense MLP
     * @return the pattern
     * @throws IllegalArgumentException if empty or holding other values
     */
    public static MoeLayerPattern of(List<Integer> layers) {
        return new MoeLayerPattern(0, layers);
    }

    /**
     * Megatron's {@code --moe-layer-freq} value: an integer N (every N-th layer), or a Python list expression of
     * integers, lists, {@code +}, {@code *} and parentheses such as {@code ([0]*1+[1]*3)} or {@code [0,1,1,1]},
     * evaluated here as Python would, without running any code. Blanks are ignored (Megatron refuses them).
     *
     * @param text the flag's value
     * @return the pattern
     * @throws IllegalArgumentException saying what is wrong and where
     */
    public static MoeLayerPattern parse(String text) {
        if (text.indexOf('[') < 0) {
            try {
                return every(Integer.parseInt(text.strip()));
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException("expected an integer or a list expression such as ([0]*1+[1]*3), got "
                        + text);
            }
        }
        Object value = new ListExpression(text).evaluate();
        if (!(value instanceof List<?> list)) {
            throw new IllegalArgumentException(text + " is the number " + value + ", not a list of 0 and 1");
        }
        @SuppressWarnings("unchecked")
        List<Integer> entries = (List<Integer>) list;
        if (entries.isEmpty()) {
            throw new IllegalArgumentException(text + " is an empty list");
        }
        return of(entries);
    }

    /**
     * @param layer a global layer index from 0
     * @return whether it has a mixture of experts
     */
    public boolean isMoe(int layer) {
        return layers.isEmpty() ? layer % frequency == 0 : layers.get(layer) == 1;
    }

    /**
     * @param numLayers the model's layers
     * @return how many of them have a mixture of experts
     */
    public int count(int numLayers) {
        int n = 0;
        for (int l = 0; l < numLayers; l++) {
            n += isMoe(l) ? 1 : 0;
        }
        return n;
    }

    /**
     * Checks an explicit list against the model's layers (Megatron requires one entry per layer).
     *
     * @param numLayers the model's layers
     * @throws IllegalArgumentException naming both lengths
     */
    public void check(int numLayers) {
        if (!layers.isEmpty() && layers.size() != numLayers) {
            throw new IllegalArgumentException("MoE layer pattern " + this + " has " + layers.size() + " entries for "
                    + numLayers + " layers");
        }
    }

    /** @return the frequency, or the list as Megatron writes it */
    @Override
    public String toString() {
        return layers.isEmpty() ? String.valueOf(frequency) : layers.toString().replace(" ", "");
    }

    /**
     * A recursive-descent evaluator of Python expressions over non-negative integers and flat lists of them:
     * {@code expr := term ('+' term)*}, {@code term := atom ('*' atom)*},
     * {@code atom := digits | '[' [expr (',' expr)* [',']] ']' | '(' expr ')'}, with Python's meaning of
     * {@code +} and {@code *} on integers and lists.
     */
    private static final class ListExpression {
        private final String text;
        private int at;

        ListExpression(String text) {
            this.text = text;
        }

        Object evaluate() {
            Object value = sum();
            skipBlanks();
            if (at < text.length()) {
                throw error("unexpected '" + text.charAt(at) + "'");
            }
            return value;
        }

        private Object sum() {
            Object value = product();
            while (accept('+')) {
                value = add(value, product());
            }
            return value;
        }

        private Object product() {
            Object value = atom();
            while (accept('*')) {
                value = multiply(value, atom());
            }
            return value;
        }

        /** Python's {@code +}: integers add, lists concatenate. */
        private Object add(Object left, Object right) {
            if (left instanceof Integer a && right instanceof Integer b) {
                return checked((long) a + b);
            }
            if (left instanceof List<?> a && right instanceof List<?> b) {
                List<Integer> joined = new ArrayList<>(ints(a));
                joined.addAll(ints(b));
                return capped(joined);
            }
            throw error("cannot add a list and a number");
        }

        /** Python's {@code *}: integers multiply, a list and an integer repeat the list. */
        private Object multiply(Object left, Object right) {
            if (left instanceof Integer a && right instanceof Integer b) {
                return checked((long) a * b);
            }
            if (left instanceof List<?> a && right instanceof Integer n) {
                return repeat(ints(a), n);
            }
            if (left instanceof Integer n && right instanceof List<?> b) {
                return repeat(ints(b), n);
            }
            throw error("cannot multiply two lists");
        }

        private Object atom() {
            skipBlanks();
            if (accept('(')) {
                Object value = sum();
                expect(')');
                return value;
            }
            if (accept('[')) {
                List<Integer> list = new ArrayList<>();
                if (accept(']')) {
                    return list;
                }
                do {
                    skipBlanks();
                    if (peek(']')) {
                        break; // a trailing comma, as Python allows
                    }
                    Object element = sum();
                    if (!(element instanceof Integer i)) {
                        throw error("a list inside a list");
                    }
                    list.add(i);
                } while (accept(','));
                expect(']');
                return capped(list);
            }
            int start = at;
            while (at < text.length() && Character.isDigit(text.charAt(at))) {
                at++;
            }
            if (start == at) {
                throw error(at < text.length() ? "unexpected '" + text.charAt(at) + "'" : "unexpected end");
            }
            try {
                return Integer.parseInt(text.substring(start, at));
            } catch (NumberFormatException e) {
                throw error("number " + text.substring(start, at) + " is too large");
            }
        }

        private List<Integer> repeat(List<Integer> list, int times) {
            if ((long) list.size() * Math.max(times, 0) > MAX_ENTRIES) {
                throw error("the list would have more than " + MAX_ENTRIES + " entries");
            }
            List<Integer> out = new ArrayList<>();
            for (int i = 0; i < times; i++) {
                out.addAll(list);
            }
            return out;
        }

        private List<Integer> capped(List<Integer> list) {
            if (list.size() > MAX_ENTRIES) {
                throw error("the list would have more than " + MAX_ENTRIES + " entries");
            }
            return list;
        }

        private Integer checked(long value) {
            if (value > Integer.MAX_VALUE) {
                throw error("number " + value + " is too large");
            }
            return (int) value;
        }

        @SuppressWarnings("unchecked")
        private static List<Integer> ints(List<?> list) {
            return (List<Integer>) list;
        }

        private boolean accept(char c) {
            skipBlanks();
            if (at < text.length() && text.charAt(at) == c) {
                at++;
                return true;
            }
            return false;
        }

        private boolean peek(char c) {
            return at < text.length() && text.charAt(at) == c;
        }

        private void expect(char c) {
            if (!accept(c)) {
                throw error("expected '" + c + "'");
            }
        }

        private void skipBlanks() {
            while (at < text.length() && Character.isWhitespace(text.charAt(at))) {
                at++;
            }
        }

        private IllegalArgumentException error(String what) {
            return new IllegalArgumentException(what + " at position " + at + " of " + text);
        }
    }
}
