package io.mcore4j.planner;

import java.util.Locale;

/**
 * One rank's device memory at its peak, in bytes, by what holds it. The peak is
 * {@code parameters + optimizerState + max(activations + gradientsAtActivationPeak, gradients +
 * gradientBuffers + optimizerWorkspace) + overhead}: gradients come into being during the first backward of a step (the
 * optimizer's {@code zeroGrad} frees them at its end), and the gradient
 * buffers of the data-parallel reduction live from the gradient sync to the end of the optimizer step.
 *
 * @param stage the pipeline rank this is (the one with the highest peak)
 * @param parameters the model's parameters on this rank, in their dtype (ZeRO-3: those whole at once, see
 *     {@link MemoryModel})
 * @param gradients {@code .grad} of every parameter (its dtype), from backward to the end of the step (ZeRO-2 and
 *     ZeRO-3: only those whole at once)
 * @param optimizerState float32 master weights and the update rule's state (Adam: two moments),
 *     sharded over data-parallel ranks with the distributed optimizer; on the device: without the
 *     share {@code optimizerStateOnHost}
 * @param optimizerStateOnHost the share of the optimizer state held in host memory under
 *     {@link io.mcore4j.optimizer.OptimizerConfig#optimizerCpuOffload()} (0 without it); not in {@link #total()}
 * @param activationsPerMicroBatch bytes one micro-batch keeps for backward on this stage
 * @param inFlightMicroBatches micro-batches whose activations the schedule holds at once on this stage
 *     (1F1B: PP - stage; interleaved: counted in model chunks and converted to micro-batches)
 * @param activations everything live at the backward peak: kept activations of the micro-batches in
 *     flight, the logits and loss (last stage), and the gradients flowing through a layer
 * @param gradientsAtActivationPeak gradients alive when the activations peak: all of them, because a
 *     micro-batch's pass keeps its graph until its backward ends and the first micro-batch's backward
 *     allocates every {@code .grad} while its activations are still held (ZeRO-2 and ZeRO-3: the whole ones
 *     and the reduction buffers, which live through backward)
 * @param gradientBuffers the data-parallel reduction's flat buffers (float32 by default), alive from
 *     the gradient sync to the end of the optimizer step
 * @param optimizerWorkspace what the optimizer step allocates beyond gradients and buffers (calibrated)
 * @param overhead what the device holds besides tensors (CUDA context, allocator slack), from the calibration
 */
public record MemoryEstimate(int stage, long parameters, long gradients, long optimizerState, long optimizerStateOnHost,
                             long activationsPerMicroBatch, double inFlightMicroBatches, long activations,
                             long gradientsAtActivationPeak, long gradientBuffers, long optimizerWorkspace,
                             long overhead) {

    /** @return the peak bytes of device memory */
    public long total() {
        return parameters + optimizerState + Math.max(activations + gradientsAtActivationPeak,
                gradients + gradientBuffers + optimizerWorkspace)
                + overhead;
    }

    /** @return a one-line breakdown in GiB */
    public String describe() {
        return String.format(Locale.ROOT, "%.2f GiB = params %.2f + optimizer %.2f + max(activations %.2f [%.3f per"
                        + " micro-batch x %.2f in flight, logits, transients] + grads so far %.2f, grads %.2f + grad buffers"
                        + " %.2f + optimizer workspace %.2f) + overhead %.2f (pipeline stage %d)%s",
                gib(total()), gib(parameters), gib(optimizerState), gib(activations), gib(activationsPerMicroBatch),
                inFlightMicroBatches, gib(gradientsAtActivationPeak), gib(gradients), gib(gradientBuffers),
                gib(optimizerWorkspace), gib(overhead),
                stage, optimizerStateOnHost > 0
                        ? String.format(Locale.ROOT, "; optimizer state on the host %.2f", gib(optimizerStateOnHost)) : "");
    }

    static double gib(long bytes) {
        return bytes / (double) (1L << 30);
    }
}
