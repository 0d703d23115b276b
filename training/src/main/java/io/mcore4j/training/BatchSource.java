package io.mcore4j.training;

import ai.djl.ndarray.NDManager;

/**
 * Where a {@link TrainStep} takes its micro-batches from: this rank's data-parallel slice of the
 * global batch that starts after {@code consumedSamples} samples. Implementations are
 * deterministic in their arguments, so a resumed run sees exactly the samples the stopped run
 * would have seen next.
 */
@FunctionalInterface
public interface BatchSource {

    /**
     * Reads one micro-batch.
     *
     * @param manager where the tensors are created (the step's scope, on the training device)
     * @param consumedSamples samples consumed by all data-parallel ranks before this step
     * @param microBatch the micro-batch index in {@code [0, microBatchesPerStep)}
     * @return the micro-batch; never null
     */
    MicroBatch microBatch(NDManager manager, long consumedSamples, int microBatch);
}
