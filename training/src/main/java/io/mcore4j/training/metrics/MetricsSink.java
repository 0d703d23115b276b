package io.mcore4j.training.metrics;

import java.util.Map;

/**
 * Where the training loop sends the scalars of a logged iteration (a JSONL file, TensorBoard event
 * files, the console). Names are Megatron-LM's TensorBoard names ({@link MetricNames}); values are
 * finite or NaN. Called by the logging rank only, from the training thread.
 */
public interface MetricsSink extends AutoCloseable {
    /**
     * Records the scalars of one iteration.
     *
     * @param iteration the iteration (1-based) the values belong to
     * @param scalars name to value, in a stable order; never null
     */
    void write(long iteration, Map<String, Double> scalars);

    /**
     * Called once before the first iteration: 0 for a fresh run, else the iteration a resumed run
     * continues after. A file-backed sink keeps one run per file (a fresh run does not append to
     * another run's records; a resumed run drops records past {@code startIteration}).
     *
     * @param startIteration iterations already done
     * @param trainIterations the iteration the run stops at
     */
    default void begin(long startIteration, long trainIterations) {}

    /**
     * Called after every iteration, logged or not (progress displays).
     *
     * @param iteration the iteration just done
     * @param trainIterations the iteration the run stops at
     */
    default void iterationDone(long iteration, long trainIterations) {}

    /** Flushes and releases files; the sink is unusable afterwards. */
    @Override
    default void close() {}
}
