package io.mcore4j.optimizer;

import java.util.Objects;

/**
 * Weight decay as a function of the step, moving from {@code start} to {@code end} over
 * {@code steps} steps and staying at {@code end} afterwards. With {@code r = min(step, steps) / steps}:
 * {@link Style#CONSTANT} gives {@code end} (which must equal {@code start}), {@link Style#LINEAR}
 * {@code start + (end - start) r}, {@link Style#COSINE}
 * {@code start + (end - start) (1 + cos(pi (1 - r))) / 2}.
 *
 * @param start decay at step 0
 * @param end decay from step {@code steps} on
 * @param steps length of the ramp
 * @param style shape of the ramp
 */
public record WeightDecaySchedule(double start, double end, long steps, Style style) {

    /** The shape of the ramp. */
    public enum Style {
        /** Always {@code start}. */
        CONSTANT,
        /** Straight line. */
        LINEAR,
        /** Half a cosine period. */
        COSINE
    }

    /**
     * Validates the schedule.
     *
     * @throws IllegalArgumentException for negative values, a ramp of no steps, or a constant schedule with {@code start != end}
     */
    public WeightDecaySchedule {
        Objects.requireNonNull(style, "style");
        if (!(start >= 0) || !(end >= 0) || Double.isInfinite(start) || Double.isInfinite(end)) {
            throw new IllegalArgumentException("weight decay start " + start + " and end " + end + " must be finite and >= 0");
        }
        if (style == Style.CONSTANT && start != end) {
            throw new IllegalArgumentException("a constant weight decay needs start == end, got " + start + " and " + end);
        }
        if (style != Style.CONSTANT && steps < 1) {
            throw new IllegalArgumentException("a " + style + " weight decay ramp needs steps >= 1, got " + steps);
        }
    }

    /**
     * A schedule that always returns {@code decay}.
     *
     * @param decay the weight decay
     * @return the schedule
     */
    public static WeightDecaySchedule constant(double decay) {
        return new WeightDecaySchedule(decay, decay, 0, Style.CONSTANT);
    }

    /**
     * The weight decay at {@code step}.
     *
     * @param step the optimizer step, from 0
     * @return the decay
     */
    public double at(long step) {
        if (step < 0) {
            throw new IllegalArgumentException("step " + step + " must be >= 0");
        }
        if (style == Style.CONSTANT) {
            return start;
        }
        double ratio = Math.min(step, steps) / (double) steps;
        double coefficient = style == Style.LINEAR ? ratio : 0.5 * (1 + Math.cos(Math.PI * (1 - ratio)));
        return start + (end - start) * coefficient;
    }
}
