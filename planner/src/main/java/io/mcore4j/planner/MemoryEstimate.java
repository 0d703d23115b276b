package io.mcore4j.planner;

import java.util.Locale;

/**
 * One rank's device memory at its peak, in bytes, by what holds it. The peak is
 * {@code parameters + gradients + optimizerState + max(activations, gradientBuffers) + overhead}:
 * activations are gone when the gradient buffers of the data-parallel reduction are allocated, and
 * those are released when the step ends.
 *
 * @param stage the pipeline rank this is (the one with the highest peak)
 * @param parameters the model's parameters on this rank, in their dtype
 * @param gradients {@code .grad} of every parameter (its dtype), kept between steps
 * @param optimizerState float32 master weights and the update rule's state (Adam: two moments),
 *     sharded over data-parallel ranks with the distributed optimizer
 * @param activationsPerMicroBatch bytes one micro-batch keeps for backward on this stage
 * @param inFlightMicroBatches micro-batches whose activations the schedule holds at once on this stage
 *     (1F1B: PP - stage; interleaved: counted in model chunks and converted to micro-batches)
 * @param activations everything live at the backward peak: kept activations of the micro-batches in
 *     flight, the logits and loss (last stage), and the gradients flowing through a layer
 * @param gradientBuffers the data-parallel reduction's flat buffers (float32 by default), alive from
 *     the gradient sync to the end of the optimizer step
 * @param overhead what the device holds besides tensors (CUDA context, allocator slack), from the calibration
 */
public record MemoryEstimate(int stage, long parameters, long gradients, long optimizerState,
                             long activationsPerMicroBatch, double inFlightMicroBatches, long activations,
                             long gradientBuffers, long overhead) {

    /** @return the peak bytes */
    public long total() {
        return parameters + gradients + optimizerState + Math.max(activations, gradientBuffers) + overhead;
    }

    /** @return a one-line breakdown in GiB */
    public String describe() {
        return String.format(Locale.ROOT, "%.2f GiB = params %.2f + grads %.2f + optimizer %.2f + max(activations %.2f"
                        + " [%.3f x %.2f in flight + logits/transients], grad buffers %.2f) + overhead %.2f (stage %d)",
                gib(total()), gib(parameters), gib(gradients), gib(optimizerState), gib(activations),
                gib(activationsPerMicroBatch), inFlightMicroBatches, gib(gradientBuffers), gib(overhead), stage);
    }

    static double gib(long bytes) {
        return bytes / (double) (1L << 30);
    }
}
