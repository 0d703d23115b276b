package io.mcore4j.training;

import java.util.List;

/**
 * What a {@link TrainingLoop} run did on this rank.
 *
 * @param startIteration iterations already done when the run began (0 unless resumed)
 * @param iteration the last iteration done
 * @param consumedSamples training samples consumed, all data-parallel ranks together
 * @param losses the loss of each iteration this run did, on the logging rank (last pipeline stage,
 *               tensor and data-parallel rank 0); empty elsewhere
 */
public record TrainingSummary(long startIteration, long iteration, long consumedSamples, List<Double> losses) {
    /** Copies the losses. */
    public TrainingSummary {
        losses = List.copyOf(losses);
    }
}
