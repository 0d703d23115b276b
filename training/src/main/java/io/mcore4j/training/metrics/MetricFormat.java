package io.mcore4j.training.metrics;

import java.math.BigDecimal;
import java.math.MathContext;
import java.util.Locale;

/** Number formatting for logs and plots: a few significant digits, plain where plain is readable. */
public final class MetricFormat {
    private MetricFormat() {}

    /**
     * Formats {@code v} with {@code digits} significant digits: plainly between 0.001 and a million
     * (trailing zeros dropped: 4.2, 0.00312, 12350), in scientific notation outside (3.000e-04).
     *
     * @param v the value; NaN and infinities print as Java does
     * @param digits significant digits, at least 1
     * @return the text
     */
    public static String significant(double v, int digits) {
        if (!Double.isFinite(v)) {
            return Double.toString(v);
        }
        if (v == 0) {
            return "0";
        }
        double a = Math.abs(v);
        if (a < 1e-3 || a >= 1e6) {
            return String.format(Locale.ROOT, "%." + Math.max(0, digits - 1) + "e", v);
        }
        BigDecimal d = new BigDecimal(v).round(new MathContext(digits)).stripTrailingZeros();
        return d.scale() < 0 ? d.setScale(0).toPlainString() : d.toPlainString();
    }
}
