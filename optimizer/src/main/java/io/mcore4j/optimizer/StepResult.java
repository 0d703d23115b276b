package io.mcore4j.optimizer;

/**
 * What one optimizer step did.
 *
 * @param skipped true if some rank's gradients held inf/NaN, so no rank updated its parameters
 * @param gradNorm global L2 norm of the (unscaled, unclipped) gradients; NaN when skipped
 * @param lossScale the loss scale for the next step (1.0 without fp16)
 * @param numZeros number of zero gradient elements over the whole model, or -1 when not counted
 *                 ({@link OptimizerConfig#countZerosInGrad()} off, or the step was skipped)
 */
public record StepResult(boolean skipped, double gradNorm, double lossScale, long numZeros) {}
