package io.mcore4j.training;

/**
 * What one {@link TrainStep} iteration did, on this rank.
 *
 * @param loss the step's mean loss over its micro-batches and data-parallel ranks, unscaled, on the
 *             last pipeline stage; NaN on other stages
 * @param gradNorm global gradient norm before clipping (NaN when the step was skipped)
 * @param lossScale the loss scale the step used (1 without fp16)
 * @param skipped whether the optimizer skipped the update (fp16 overflow)
 * @param numZeros zero gradient elements, when the optimizer counts them, else 0
 * @param samples samples of the global batch (all data-parallel ranks)
 * @param tokens tokens of the global batch
 * @param seconds wall time of the step on this rank
 * @param phases device-synchronised phase times, or null unless the step was built to time phases
 */
public record TrainStepResult(double loss, double gradNorm, double lossScale, boolean skipped, long numZeros,
                              long samples, long tokens, double seconds, PhaseTimes phases) {

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
