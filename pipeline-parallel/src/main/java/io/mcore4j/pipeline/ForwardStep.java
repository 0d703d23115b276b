package io.mcore4j.pipeline;

import ai.djl.ndarray.NDArray;
import io.mcore4j.core.autograd.AutogradScope;

/**
 * One forward of one micro-batch through one model chunk of this pipeline stage: what the user of
 * a schedule provides. The schedule calls it on the thread that called the schedule, with grad mode
 * set for {@code scope} (on when training, off for forward-only runs).
 */
@FunctionalInterface
public interface ForwardStep {

    /**
     * Runs the chunk's forward.
     *
     * @param scope the micro-batch's scope: the schedule opens one per micro-batch per chunk, keeps it
     *              until that micro-batch's backward, then closes it (with everything created in it).
     *              Create the pass's tensors in {@code scope.manager()}.
     * @param chunk the model chunk, i.e. the virtual stage index on this rank (0 without interleaving)
     * @param microBatch the micro-batch index in {@code [0, numMicrobatches)}
     * @param input the activation received from the previous stage, a leaf that requires grad when
     *              training and is owned by {@code scope}; {@code null} on the very first stage
     *              (pipeline rank 0, chunk 0), which reads its own data
     * @return on the last stage (last pipeline rank, last chunk) the micro-batch's scalar loss, unscaled
     *         (the schedule records it and back-propagates {@code loss / numMicrobatches}, as Megatron
     *         does); elsewhere the output activation to send on, of the configured shape and dtype
     */
    NDArray forward(AutogradScope scope, int chunk, int microBatch, NDArray input);
}
