package io.mcore4j.pipeline;

import ai.djl.ndarray.NDArray;

import java.util.Arrays;

/**
 * What a forward-backward run returns on one rank.
 *
 * @param losses each micro-batch's loss as the forward step returned it (not scaled by
 *               {@code 1 / numMicrobatches}), indexed by micro-batch, on the last pipeline stage;
 *               empty on every other stage, and when the run left its losses on the device. Never null.
 * @param peakLiveMicroBatches the most micro-batch scopes this rank held open at once (activation
 *                             memory in micro-batches); at most warmup + 1 when training
 * @param deviceLosses with {@link ScheduleConfig#lossesOnDevice()}, on the last pipeline stage: the same
 *                     losses as a float32 {@code [numMicrobatches]} tensor, not yet read by the host,
 *                     owned by the manager given to the run (the caller closes it); null otherwise
 */
public record ScheduleResult(float[] losses, int peakLiveMicroBatches, NDArray deviceLosses) {

    /** Copies the losses and validates the count. */
    public ScheduleResult {
        losses = losses == null ? new float[0] : losses.clone();
        if (peakLiveMicroBatches < 0) {
            throw new IllegalArgumentException("peak live micro-batches must be >= 0, got " + peakLiveMicroBatches);
        }
    }

    /**
     * A result whose losses were read to the host.
     *
     * @param losses each micro-batch's loss (see the record comment)
     * @param peakLiveMicroBatches the most micro-batch scopes held open at once
     */
    public ScheduleResult(float[] losses, int peakLiveMicroBatches) {
        this(losses, peakLiveMicroBatches, null);
    }

    /** @return a copy of the per-micro-batch losses */
    @Override
    public float[] losses() {
        return losses.clone();
    }

    /** @return whether this rank returned losses read to the host (it is the last stage) */
    public boolean hasLosses() {
        return losses.length > 0;
    }

    /**
     * The mean of the losses, summed in double in micro-batch order: the figure a training step
     * reports. {@link #meanOf} gives the same for losses read later from {@link #deviceLosses()}.
     *
     * @return the mean, or NaN on ranks without losses read to the host
     */
    public double meanLoss() {
        return meanOf(losses);
    }

    /**
     * @param losses per-micro-batch losses
     * @return their mean, summed in double in order; NaN when there are none
     */
    public static double meanOf(float[] losses) {
        if (losses.length == 0) {
            return Double.NaN;
        }
        double sum = 0;
        for (float l : losses) {
            sum += l;
        }
        return sum / losses.length;
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof ScheduleResult r && Arrays.equals(losses, r.losses)
                && peakLiveMicroBatches == r.peakLiveMicroBatches && deviceLosses == r.deviceLosses;
    }

    @Override
    public int hashCode() {
        return 31 * Arrays.hashCode(losses) + peakLiveMicroBatches;
    }

    @Override
    public String toString() {
        return "ScheduleResult{losses=" + Arrays.toString(losses) + ", peakLiveMicroBatches=" + peakLiveMicroBatches
                + (deviceLosses != null ? ", losses on the device" : "") + "}";
    }
}
