package io.mcore4j.optimizer;

import java.util.Objects;

/**
 * Learning rate as a function of the step: linear warmup from 0 to {@code maxLr} over
 * {@code warmupSteps}, then a decay to {@code minLr} that ends at step {@code decaySteps}
 * (counted from step 0, warmup included), then {@code minLr}.
 *
 * <p>With {@code w = warmupSteps}, {@code D = decaySteps} and step {@code s}:
 * <ul>
 *   <li>{@code s <= w} (and {@code w > 0}): {@code maxLr * s / w};</li>
 *   <li>{@link Style#CONSTANT}: {@code maxLr};</li>
 *   <li>{@code s > D}: {@code minLr};</li>
 *   <li>otherwise, with {@code r = (s - w) / (D - w)}: {@link Style#LINEAR}
 *       {@code minLr + (maxLr - minLr) * (1 - r)}, {@link Style#COSINE}
 *       {@code minLr + (maxLr - minLr) * (1 + cos(pi r)) / 2}, {@link Style#INVERSE_SQUARE_ROOT}
 *       {@code max(minLr, maxLr * sqrt(max(w, 1)) / sqrt(max(s, 1)))}.</li>
 * </ul>
 *
 * @param maxLr peak learning rate
 * @param minLr final learning rate
 * @param warmupSteps steps of linear warmup
 * @param decaySteps step at which the decay reaches {@code minLr}
 * @param style the shape of the decay
 */
public record LearningRateSchedule(double maxLr, double minLr, long warmupSteps, long decaySteps, Style style) {

    /** The shape of the decay after warmup. */
    public enum Style {
        /** Stay at {@code maxLr}. */
        CONSTANT,
        /** Straight line to {@code minLr}. */
        LINEAR,
        /** Half a cosine period to {@code minLr}. */
        COSINE,
        /** {@code maxLr * sqrt(warmup / step)}, floored at {@code minLr}. */
        INVERSE_SQUARE_ROOT
    }

    /**
     * Validates the schedule.
     *
     * @throws IllegalArgumentException if a rate is negative, {@code minLr > maxLr}, or the step counts are inconsistent
     */
    public LearningRateSchedule {
        Objects.requireNonNull(style, "style");
        if (!(minLr >= 0) || !(maxLr >= minLr) || Double.isInfinite(maxLr)) {
            throw new IllegalArgumentException("learning rates must satisfy 0 <= min lr <= max lr < inf, got min "
                    + minLr + " and max " + maxLr);
        }
        if (warmupSteps < 0) {
            throw new IllegalArgumentException("warmup steps " + warmupSteps + " must be >= 0");
        }
        if (style != Style.CONSTANT && decaySteps < warmupSteps) {
            throw new IllegalArgumentException("decay steps " + decaySteps + " must be at least the warmup steps "
                    + warmupSteps + " for a " + style + " decay");
        }
    }

    /**
     * A schedule that always returns {@code lr}.
     *
     * @param lr the rate
     * @return the schedule
     */
    public static LearningRateSchedule constant(double lr) {
        return new LearningRateSchedule(lr, lr, 0, 0, Style.CONSTANT);
    }

    /**
     * The learning rate at {@code step}.
     *
     * @param step the optimizer step, from 0
     * @return the rate
     * @throws IllegalArgumentException if {@code step} is negative
     */
    public double lr(long step) {
        if (step < 0) {
            throw new IllegalArgumentException("step " + step + " must be >= 0");
        }
        if (warmupSteps > 0 && step <= warmupSteps) {
            return maxLr * step / warmupSteps;
        }
        if (style == Style.CONSTANT) {
            return maxLr;
        }
        if (step > decaySteps) {
            return minLr;
        }
        if (style == Style.INVERSE_SQUARE_ROOT) {
            double lr = maxLr * Math.sqrt(Math.max(warmupSteps, 1)) / Math.sqrt(Math.max(step, 1));
            return Math.max(minLr, lr);
        }
        double ratio = (double) (step - warmupSteps) / (decaySteps - warmupSteps);
        double coefficient = style == Style.LINEAR ? 1 - ratio : 0.5 * (1 + Math.cos(Math.PI * ratio));
        return minLr + (maxLr - minLr) * coefficient;
    }
}
