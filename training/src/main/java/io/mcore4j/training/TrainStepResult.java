package io.mcore4j.training;

import java.util.Objects;
import java.util.function.DoubleSupplier;

/**
 * What one {@link TrainStep} iteration did, on this rank.
 *
 * <p>The loss stays on the device until {@link #loss()} is first called: reading a device value
 * makes the host wait for every kernel queued so far, which would starve the GPU once per iteration.
 * {@link TrainingLoop} reads the losses of a logged window when it logs (as Megatron does); a step's
 * device copy is released when its loss is read, or when the {@link TrainStep} closes. Every other
 * figure is a host value. One instance is used by one thread.
 */
public final class TrainStepResult {
    private DoubleSupplier lossReader;
    private double loss;
    private final double gradNorm;
    private final double lossScale;
    private final boolean skipped;
    private final long numZeros;
    private final long samples;
    private final long tokens;
    private final double seconds;
    private final PhaseTimes phases;

    /**
     * A result whose loss is already on the host.
     *
     * @param loss see {@link #loss()}
     * @param gradNorm see {@link #gradNorm()}
     * @param lossScale see {@link #lossScale()}
     * @param skipped see {@link #skipped()}
     * @param numZeros see {@link #numZeros()}
     * @param samples see {@link #samples()}
     * @param tokens see {@link #tokens()}
     * @param seconds see {@link #seconds()}
     * @param phases see {@link #phases()}
     */
    public TrainStepResult(double loss, double gradNorm, double lossScale, boolean skipped, long numZeros,
                           long samples, long tokens, double seconds, PhaseTimes phases) {
        this(null, loss, gradNorm, lossScale, skipped, numZeros, samples, tokens, seconds, phases);
    }

    /** A result whose loss {@code lossReader} reads, once, on the first call of {@link #loss()}. */
    TrainStepResult(DoubleSupplier lossReader, double gradNorm, double lossScale, boolean skipped, long numZeros,
                    long samples, long tokens, double seconds, PhaseTimes phases) {
        this(Objects.requireNonNull(lossReader, "lossReader"), Double.NaN, gradNorm, lossScale, skipped, numZeros,
                samples, tokens, seconds, phases);
    }

    private TrainStepResult(DoubleSupplier lossReader, double loss, double gradNorm, double lossScale, boolean skipped,
                            long numZeros, long samples, long tokens, double seconds, PhaseTimes phases) {
        this.lossReader = lossReader;
        this.loss = loss;
        this.gradNorm = gradNorm;
        this.lossScale = lossScale;
        this.skipped = skipped;
        this.numZeros = numZeros;
        this.samples = samples;
        this.tokens = tokens;
        this.seconds = seconds;
        this.phases = phases;
    }

    /**
     * The step's mean loss over its micro-batches and data-parallel ranks, unscaled; read from the
     * device on the first call (a host wait for the work queued so far, see the class comment).
     *
     * @return the loss on the last pipeline stage; NaN on other stages
     * @throws IllegalStateException if the loss was still unread when its {@link TrainStep} closed
     */
    public double loss() {
        if (lossReader != null) {
            loss = lossReader.getAsDouble();
            lossReader = null;
        }
        return loss;
    }

    /** @return whether the loss is on the host already, so that {@link #loss()} waits for nothing */
    public boolean lossRead() {
        return lossReader == null;
    }

    /** @return global gradient norm before clipping (NaN when the step was skipped) */
    public double gradNorm() {
        return gradNorm;
    }

    /** @return the loss scale the step used (1 without fp16) */
    public double lossScale() {
        return lossScale;
    }

    /** @return whether the optimizer skipped the update (fp16 overflow) */
    public boolean skipped() {
        return skipped;
    }

    /** @return zero gradient elements, when the optimizer counts them, else 0 */
    public long numZeros() {
        return numZeros;
    }

    /** @return samples of the global batch (all data-parallel ranks) */
    public long samples() {
        return samples;
    }

    /** @return tokens of the global batch */
    public long tokens() {
        return tokens;
    }

    /** @return wall time of the step on this rank, in seconds (the host's: work still queued is not in it) */
    public double seconds() {
        return seconds;
    }

    /** @return device-synchronised phase times, or null unless the step was built to time phases */
    public PhaseTimes phases() {
        return phases;
    }

    /**
     * Device-synchronised durations of a step's phases, in seconds.
     *
     * @param data reading the micro-batches onto the device
     * @param forwardBackward the schedule's forwards and backwards
     * @param queued time the host took to queue the forwards and backwards (part of {@code forwardBackward})
     * @param gradSync finishing the data-parallel gradient reduction
     * @param optimizer the optimizer step (unscale, clip, update, copy back)
     * @param zeroGrad zeroing the gradients
     */
    public record PhaseTimes(double data, double forwardBackward, double queued, double gradSync, double optimizer,
                             double zeroGrad) {}
}
