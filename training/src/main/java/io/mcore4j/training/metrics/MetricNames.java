package io.mcore4j.training.metrics;

/** Megatron-LM's TensorBoard scalar names, used by every {@link MetricsSink}. */
public final class MetricNames {
    private MetricNames() {}

    /** Mean language-model loss over the logging window. */
    public static final String LOSS = "lm loss";
    /** Validation loss. */
    public static final String VALID_LOSS = "lm loss validation";
    /** Validation perplexity. */
    public static final String VALID_PPL = "lm loss validation ppl";
    /** Learning rate of the iteration. */
    public static final String LEARNING_RATE = "learning-rate";
    /** Global gradient norm before clipping. */
    public static final String GRAD_NORM = "grad-norm";
    /** Loss scale (1 without fp16). */
    public static final String LOSS_SCALE = "loss-scale";
    /** Iterations skipped (overflow) in the window. */
    public static final String SKIPPED = "skipped-iterations";
    /** Global batch size in samples. */
    public static final String BATCH_SIZE = "batch-size";
    /** Seconds per iteration, averaged over the window. */
    public static final String ITERATION_TIME = "iteration-time";
    /** Tokens per second, all ranks together. */
    public static final String TOKENS_PER_SECOND = "throughput/tokens-per-sec";
    /** Model TFLOP/s per rank. */
    public static final String TFLOPS_PER_RANK = "throughput/tflops-per-gpu";
    /** Device memory in use, GiB. */
    public static final String MEMORY_GIB = "mem-allocated-gigabytes";
    /** MoE load-balancing loss. */
    public static final String LOAD_BALANCING_LOSS = "load_balancing_loss";
    /** MoE router z-loss. */
    public static final String Z_LOSS = "z_loss";
}
