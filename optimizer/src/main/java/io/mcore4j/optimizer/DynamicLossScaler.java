package io.mcore4j.optimizer;

/**
 * Dynamic loss scaling for float16 training. The training loop multiplies the loss by
 * {@link #scale()} before backward; the optimizer divides the gradients by it and reports with
 * {@link #update(boolean)} whether any rank saw an inf or NaN.
 *
 * <p>Rules: a step with inf/NaN resets the growth count and uses up one unit of hysteresis; when
 * the hysteresis is used up the scale is multiplied by the backoff factor (never below the
 * minimum). After {@code growthInterval} consecutive clean steps the scale is multiplied by the
 * growth factor and the hysteresis is restored. Holds no native memory; one instance per optimizer.
 */
public final class DynamicLossScaler {
    private final double minScale;
    private final double growthFactor;
    private final double backoffFactor;
    private final int growthInterval;
    private final int hysteresis;
    private double scale;
    private int growthTracker;
    private int hysteresisTracker;

    /**
     * A scaler in its initial state.
     *
     * @param initialScale first scale, > 0
     * @param minScale lower bound, in (0, initialScale]
     * @param growthFactor multiplier after a clean window, > 1
     * @param backoffFactor multiplier after inf/NaN, in (0, 1)
     * @param growthInterval clean steps per growth, >= 1
     * @param hysteresis inf/NaN steps tolerated before backing off, >= 1
     * @throws IllegalArgumentException for a value outside its range
     */
    public DynamicLossScaler(double initialScale, double minScale, double growthFactor, double backoffFactor,
                             int growthInterval, int hysteresis) {
        if (!(initialScale > 0) || !(minScale > 0) || minScale > initialScale) {
            throw new IllegalArgumentException("loss scales must satisfy 0 < min " + minScale + " <= initial " + initialScale);
        }
        if (!(growthFactor > 1)) {
            throw new IllegalArgumentException("growth factor " + growthFactor + " must be > 1");
        }
        if (!(backoffFactor > 0 && backoffFactor < 1)) {
            throw new IllegalArgumentException("backoff factor " + backoffFactor + " must be in (0, 1)");
        }
        if (growthInterval < 1 || hysteresis < 1) {
            throw new IllegalArgumentException("growth interval " + growthInterval + " and hysteresis " + hysteresis
                    + " must be >= 1");
        }
        this.scale = initialScale;
        this.minScale = minScale;
        this.growthFactor = growthFactor;
        this.backoffFactor = backoffFactor;
        this.growthInterval = growthInterval;
        this.hysteresis = hysteresis;
        this.hysteresisTracker = hysteresis;
    }

    /**
     * The scaler an fp16 configuration asks for: growth 2, backoff 0.5.
     *
     * @param config initial and minimum scale, window, hysteresis
     * @return a new scaler
     */
    public static DynamicLossScaler from(OptimizerConfig config) {
        return new DynamicLossScaler(config.initialLossScale(), config.minLossScale(), 2.0, 0.5,
                config.lossScaleWindow(), config.hysteresis());
    }

    /** @return the current scale */
    public double scale() {
        return scale;
    }

    /** @return clean steps since the last growth or inf/NaN */
    public int growthTracker() {
        return growthTracker;
    }

    /** @return inf/NaN steps still tolerated before the next backoff */
    public int hysteresisTracker() {
        return hysteresisTracker;
    }

    /**
     * Records the outcome of a step.
     *
     * @param foundInf whether any rank's gradients held inf or NaN
     * @return the scale after the update
     */
    public double update(boolean foundInf) {
        if (foundInf) {
            growthTracker = 0;
            hysteresisTracker--;
            if (hysteresisTracker <= 0) {
                scale = Math.max(scale * backoffFactor, minScale);
            }
        } else {
            growthTracker++;
            if (growthTracker == growthInterval) {
                growthTracker = 0;
                hysteresisTracker = hysteresis;
                scale *= growthFactor;
            }
        }
        return scale;
    }

    /**
     * The mutable state, for checkpoints.
     *
     * @return {scale, growth tracker, hysteresis tracker}
     */
    public double[] state() {
        return new double[] {scale, growthTracker, hysteresisTracker};
    }

    /**
     * Restores a state returned by {@link #state()}.
     *
     * @param state {scale, growth tracker, hysteresis tracker}
     * @throws IllegalArgumentException if it does not have three entries or the scale is not positive
     */
    public void restore(double[] state) {
        if (state.length != 3 || !(state[0] > 0)) {
            throw new IllegalArgumentException("loss scaler state must be {scale > 0, growth tracker, hysteresis tracker}, got "
                    + java.util.Arrays.toString(state));
        }
        scale = state[0];
        growthTracker = (int) state[1];
        hysteresisTracker = (int) state[2];
    }
}
