package io.mcore4j.training;

/**
 * Whether a {@link TrainStep} replays its forward-backward schedule from a CUDA graph: Megatron's
 * {@code --cuda-graph-impl local --cuda-graph-scope full_iteration}. The first {@code warmupSteps}
 * steps run eagerly (libtorch's and TorchScript's first runs allocate, profile and compile); the next
 * captures every micro-batch's forward and backward into one graph, and every later step copies its
 * micro-batches into the graph's inputs and replays it, so the host queues a step's whole
 * forward-backward with one call. With {@code --overlap-grad-reduce} the graph holds the gradients' reduction too
 * (started as backward leaves each bucket's layers, as in eager steps); without it the reduction runs eagerly
 * after the replay. The optimizer step and evaluation stay eager.
 *
 * @param enabled whether steps after the warm-up replay a graph
 * @param warmupSteps eager steps before the capture ({@code --cuda-graph-warmup-steps}, Megatron's default 3);
 *                    at least 1, so that every gradient exists and every lazily built module is built
 */
public record CudaGraphConfig(boolean enabled, int warmupSteps) {
    /** Every step eager. */
    public static final CudaGraphConfig NONE = new CudaGraphConfig(false, 3);

    /** Validates the warm-up. */
    public CudaGraphConfig {
        if (warmupSteps < 1) {
            throw new IllegalArgumentException("--cuda-graph-warmup-steps " + warmupSteps + " must be at least 1 (the"
                    + " first steps build what the capture replays)");
        }
    }

    /**
     * @param warmupSteps eager steps before the capture
     * @return a configuration that captures the step's forward-backward after them
     */
    public static CudaGraphConfig fullIteration(int warmupSteps) {
        return new CudaGraphConfig(true, warmupSteps);
    }
}
