package io.mcore4j.training;

import ai.djl.ndarray.NDArray;

/**
 * The data of one micro-batch on this rank, sequence-major as Megatron lays it out. Under context
 * parallelism every tensor is this rank's part of the sequence
 * ({@link io.mcore4j.contextparallel.ContextParallelSplit#split}).
 *
 * @param tokens input token ids, int64 {@code [s, b]}; null on stages that read no data
 * @param labels target ids, int64 {@code [s, b]} (the tokens shifted by one); null on stages that read no data
 * @param lossMask weights of the tokens' losses {@code [s, b]} (1 counts, 0 ignores), or null when
 *                 every token counts
 */
public record MicroBatch(NDArray tokens, NDArray labels, NDArray lossMask) {
    /** A micro-batch for a pipeline stage that reads no data (it receives activations instead). */
    public static final MicroBatch NONE = new MicroBatch(null, null);

    /**
     * A micro-batch whose every token counts in the loss.
     *
     * @param tokens input token ids, int64 {@code [s, b]}
     * @param labels target ids, int64 {@code [s, b]}
     */
    public MicroBatch(NDArray tokens, NDArray labels) {
        this(tokens, labels, null);
    }
}
