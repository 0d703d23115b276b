package io.mcore4j.training;

import ai.djl.ndarray.NDArray;

/**
 * The data of one micro-batch on this rank, sequence-major as Megatron lays it out.
 *
 * @param tokens input token ids, int64 {@code [s, b]}; null on stages that read no data
 * @param labels target ids, int64 {@code [s, b]} (the tokens shifted by one); null on stages that read no data
 */
public record MicroBatch(NDArray tokens, NDArray labels) {
    /** A micro-batch for a pipeline stage that reads no data (it receives activations instead). */
    public static final MicroBatch NONE = new MicroBatch(null, null);
}
