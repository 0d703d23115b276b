package io.mcore4j.pipeline;

import java.util.Arrays;

/**
 * What a forward-backward run returns on one rank.
 *
 * @param losses each micro-batch's loss as the forward step returned it (not scaled by
 *               {@code 1 / numMicrobatches}), indexed by micro-batch, on the last pipeline stage;
 *               empty on every other stage. Never null.
 * @param peakLiveMicroBatches the most micro-batch scopes this rank held open at once (activation
 *                             memory in micro-batches); at most warmup + 1 when training
 */
public record ScheduleResult(float[] losses, int peakLiveMicroBatches) {

    /** Copies the losses and validates the count. */
    public ScheduleResult {
        losses = losses == null ? new float[0] : losses.clone();
        if (peakLiveMicroBatches < 0) {
            throw new IllegalArgumentException("peak live micro-batches must be >= 0, got " + peakLiveMicroBatches);
        }
    }

    /** @return a copy of the per-micro-batch losses */
    @Override
    public float[] losses() {
        return losses.clone();
    }

    /** @return whether this rank returned losses (it is the last stage) */
    public boolean hasLosses() {
        return losses.length > 0;
    }

    /** @return the mean of the losses, or NaN on ranks without losses */
    public double meanLoss() {
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
                && peakLiveMicroBatches == r.peakLiveMicroBatches;
    }

    @Override
    public int hashCode() {
        return 31 * Arrays.hashCode(losses) + peakLiveMicroBatches;
    }

    @Override
    public String toString() {
        return "ScheduleResult{losses=" + Arrays.toString(losses) + ", peakLiveMicroBatches=" + peakLiveMicroBatches + "}";
    }
}
