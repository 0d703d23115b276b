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

    /** Flushes and releases files; the sink is unusable afterwards. */
    @Override
    default void close() {}
}
