package io.mcore4j.moe;

/**
 * The upstream gradient that auxiliary losses (load balancing, z-loss) receive in backward: the
 * training loop sets it once per step to {@code lossScale / numberOfMicroBatches}, the factor by
 * which the schedule scales each micro-batch's main loss before back-propagating it.
 *
 * <p><b>Why injecting this equals adding the auxiliary loss to the main loss.</b> A step minimises
 * {@code Σ_m s·(ℓ_m + a_m)/M} over its {@code M} micro-batches, with loss scale {@code s}. The
 * schedule back-propagates each {@code ℓ_m} with upstream gradient {@code s/M}; had {@code a_m} been
 * added to {@code ℓ_m}, it would have received the same {@code s/M}. {@link AuxLossAutoScaler}
 * hands {@code a_m} exactly that upstream gradient from inside the backward pass, so libtorch adds
 * {@code (s/M)·∂a_m/∂θ} to the same {@code .grad} buffers where {@code (s/M)·∂ℓ_m/∂θ} accumulates;
 * by linearity the sum is the gradient of the combined loss. Data-parallel averaging and gradient
 * unscaling then treat both parts alike. (The main loss never has to carry the auxiliary terms,
 * which live in layers far from where the loss is computed, possibly on other pipeline stages.)
 *
 * <p>One instance per rank (per model replica), shared by every MoE layer of that rank; not
 * thread-safe and never static, because ranks of an in-JVM world run in one process. The value is
 * read when backward runs, so setting it before the step's first backward is enough.
 */
public final class AuxLossScale {
    private double value;

    /** A scale of 1 (a single micro-batch without loss scaling). */
    public AuxLossScale() {
        this(1.0);
    }

    /**
     * @param value the initial scale, finite and {@code >= 0}
     * @throws IllegalArgumentException if it is negative or not finite
     */
    public AuxLossScale(double value) {
        set(value);
    }

    /**
     * Sets the upstream gradient of every auxiliary loss for the following backward passes.
     *
     * @param value {@code lossScale / numberOfMicroBatches}, finite and {@code >= 0}
     * @throws IllegalArgumentException if it is negative or not finite
     */
    public void set(double value) {
        if (!(value >= 0) || Double.isInfinite(value)) {
            throw new IllegalArgumentException("auxiliary loss scale must be finite and >= 0, got " + value);
        }
        this.value = value;
    }

    /** @return the current scale */
    public double get() {
        return value;
    }

    @Override
    public String toString() {
        return "AuxLossScale{" + value + "}";
    }
}
