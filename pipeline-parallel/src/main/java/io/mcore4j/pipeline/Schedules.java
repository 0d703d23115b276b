package io.mcore4j.pipeline;

import ai.djl.ndarray.NDManager;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ProcessGroups;

/**
 * The forward-backward schedules: one training (or evaluation) step of {@code numMicrobatches}
 * micro-batches through this rank's model chunks, communicating with the neighbouring pipeline
 * stages over the pipeline-parallel group. Megatron-Core's {@code get_forward_backward_func}
 * counterpart; every rank of the pipeline calls it with the same configuration.
 *
 * <p>Which schedule runs:
 * <ul>
 *   <li>pipeline size 1: no pipelining. Each micro-batch's forward is followed by its backward;
 *       gradients accumulate in the parameters' {@code .grad}.</li>
 *   <li>{@code numChunks == 1}: non-interleaved 1F1B. Stage {@code r} of {@code P} runs
 *       {@code min(P - r - 1, M)} warmup forwards, then alternates one forward and one backward,
 *       then runs the remaining backwards.</li>
 *   <li>{@code numChunks > 1}: interleaved 1F1B over {@code numChunks} virtual stages per rank, with
 *       micro-batch groups of {@link ScheduleConfig#microBatchGroupSize()} (default the pipeline size);
 *       see {@link ScheduleTable} for the order and warmup.</li>
 * </ul>
 * The order of every computation and transfer is a {@link StagePlan}; it does not depend on sends
 * being buffered.
 *
 * <p><b>Per micro-batch.</b> The schedule opens one {@link io.mcore4j.core.autograd.AutogradScope}
 * (no-grad when forward-only) per micro-batch per chunk, receives the input activation into it (a
 * leaf requiring grad), calls the {@link ForwardStep}, and sends the output on. Backward: on the
 * last stage it back-propagates {@code loss / numMicrobatches}; elsewhere from the output with the
 * gradient received from the next stage. It then sends the gradient of the received input back and
 * closes the scope, releasing everything the micro-batch created. With 1F1B a stage holds at most
 * its warmup + 1 micro-batches open. Forward-only runs return the losses and leave gradients alone.
 *
 * <p><b>Failures.</b> A stalled or failed neighbour surfaces as the communicator's
 * {@link io.mcore4j.parallel.CommunicationException}, rethrown with a message that names this
 * pipeline stage, the chunk and micro-batch, and the transfer. A forward step that throws, or
 * returns a tensor of the wrong shape or dtype, fails the run. Either way every scope opened by
 * the run is closed before the exception leaves.
 */
public final class Schedules {
    private Schedules() {}

    /**
     * Runs one forward-backward step, communicating over {@code groups.pp()}.
     *
     * @param step the forward of one micro-batch through one chunk
     * @param numChunks model chunks on this rank: 1, or the virtual pipeline size for interleaving
     * @param groups this rank's groups; the pipeline-parallel group is used
     * @param manager parent of the micro-batch scopes; nothing is left in it after the run
     * @param config micro-batches, transferred shape and dtype, forward-only flag
     * @return the losses (last stage) and the peak number of live micro-batches
     * @throws IllegalArgumentException if the configuration is invalid (the message names the rule)
     * @throws io.mcore4j.parallel.CommunicationException if a transfer fails or times out
     */
    public static ScheduleResult forwardBackward(ForwardStep step, int numChunks, ProcessGroups groups,
                                                 NDManager manager, ScheduleConfig config) {
        return forwardBackward(step, numChunks, groups.pp(), manager, config);
    }

    /**
     * Runs one forward-backward step over an explicit pipeline-parallel communicator (this rank's
     * stage is its group rank).
     *
     * @param step the forward of one micro-batch through one chunk
     * @param numChunks model chunks on this rank
     * @param pp the pipeline-parallel communicator
     * @param manager parent of the micro-batch scopes
     * @param config the run's configuration
     * @return the losses (last stage) and the peak number of live micro-batches
     */
    public static ScheduleResult forwardBackward(ForwardStep step, int numChunks, Communicator pp,
                                                 NDManager manager, ScheduleConfig config) {
        if (step == null || pp == null || manager == null || config == null) {
            throw new IllegalArgumentException("step, communicator, manager and config must not be null");
        }
        Mcore4j.ensureInitialized();
        StagePlan plan = plan(numChunks, pp.size(), config);
        return new ScheduleRun(step, P2pCommunication.of(pp, config), manager, config, plan).run();
    }

    /**
     * The schedule table a run with these arguments follows (validating them).
     *
     * @param numChunks model chunks per rank
     * @param pipelineSize number of pipeline stages
     * @param config the run's configuration
     * @return the table
     * @throws IllegalArgumentException if the configuration is invalid
     */
    public static ScheduleTable table(int numChunks, int pipelineSize, ScheduleConfig config) {
        if (numChunks < 1) {
            throw new IllegalArgumentException("number of model chunks must be at least 1, got " + numChunks);
        }
        if (numChunks > 1 && pipelineSize == 1) {
            throw new IllegalArgumentException(numChunks + " model chunks (interleaving) need a pipeline size above 1;"
                    + " without pipelining run one chunk holding every layer");
        }
        return ScheduleTable.of(pipelineSize, numChunks, config.numMicrobatches(), config.microBatchGroupSize());
    }

    /**
     * The plan a run with these arguments executes on every stage.
     *
     * @param numChunks model chunks per rank
     * @param pipelineSize number of pipeline stages
     * @param config the run's configuration
     * @return the plan
     */
    public static StagePlan plan(int numChunks, int pipelineSize, ScheduleConfig config) {
        return StagePlan.of(table(numChunks, pipelineSize, config), config.forwardOnly());
    }
}
