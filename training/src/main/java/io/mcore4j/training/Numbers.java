package io.mcore4j.training;

import java.util.Locale;

/** Number formatting for logged lines: about four significant digits, thousands grouped. */
final class Numbers {
    private Numbers() {}

    static String compact(double v) {
        if (!Double.isFinite(v)) {
            return String.valueOf(v);
        }
        double a = Math.abs(v);
        if (a >= 1000) {
            return String.format(Locale.ROOT, "%,.0f", v);
        }
        if (a >= 100) {
            return String.format(Locale.ROOT, "%.1f", v);
        }
        if (a >= 1) {
            return String.format(Locale.ROOT, "%.2f", v);
        }
        return String.format(Locale.ROOT, "%.3g", v);
    }
}
