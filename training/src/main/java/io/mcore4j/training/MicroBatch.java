package io.mcore4j.training;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import io.mcore4j.contextparallel.ContextParallelSplit;
import io.mcore4j.core.PackedSequences;

/**
 * The data of one micro-batch on this rank, sequence-major as Megatron lays it out. Under context
 * parallelism every tensor is this rank's part of the sequence
 * ({@link io.mcore4j.contextparallel.ContextParallelSplit#split}).
 *
 * @param tokens input token ids, int64 {@code [s, b]}; null on stages that read no data
 * @param labels target ids, int64 {@code [s, b]} (the tokens shifted by one); null on stages that read no data
 * @param lossMask weights of the tokens' losses {@code [s, b]} (1 counts, 0 ignores), or null when
 *                 every token counts
 * @param positionIds int64 {@code [s, b]} position ids of the tokens (Megatron's {@code position_ids},
 *                    e.g. restarting after each end of document), or null for their positions in the sequence
 * @param packed the sequences packed into each column of the whole micro-batch (Megatron's
 *               {@code packed_seq_params}: no attention across their boundaries), or null for one
 *               sequence per column; host data, the same on every rank of a context-parallel group
 */
public record MicroBatch(NDArray tokens, NDArray labels, NDArray lossMask, NDArray positionIds, PackedSequences packed) {
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

    /**
     * A micro-batch of one sequence per column at positions {@code 0..S-1}.
     *
     * @param tokens input token ids, int64 {@code [s, b]}
     * @param labels target ids, int64 {@code [s, b]}
     * @param lossMask weights of the tokens' losses {@code [s, b]}, or null when every token counts
     */
    public MicroBatch(NDArray tokens, NDArray labels, NDArray lossMask) {
        this(tokens, labels, lossMask, null, null);
    }

    /**
     * This rank's micro-batch of packed sequences, made from the whole micro-batch: position ids
     * restart at each sequence's start, and every per-token tensor is split as
     * {@link ContextParallelSplit#split(NDArray, PackedSequences, NDManager)} says (per sequence where
     * every length is a multiple of {@code 2·CP}, as packed fine-tuning data pads them).
     *
     * @param manager owner of the results
     * @param packed the sequences of every column, e.g. {@link PackedSequences#ofLengths} of the
     *               conversations packed into it (trailing padding as a sequence of its own)
     * @param tokens the whole micro-batch's input ids, int64 {@code [S, b]}
     * @param labels the whole micro-batch's target ids, int64 {@code [S, b]}
     * @param lossMask the whole micro-batch's loss weights {@code [S, b]} (0 on padding and prompts), or null
     * @param split this rank's context-parallel split
     * @return the micro-batch
     * @throws IllegalArgumentException if the tensors are not {@code [S, b]} of the packing, or the
     *         sequence length cannot be split
     */
    public static MicroBatch ofPacked(NDManager manager, PackedSequences packed, NDArray tokens, NDArray labels,
                                    NDArray lossMask, ContextParallelSplit split) {
        NDArray positions = packed.positionIds(manager);
        return new MicroBatch(split.split(tokens, packed, manager), split.split(labels, packed, manager),
                lossMask == null ? null : split.split(lossMask, packed, manager), split.split(positions, packed, manager),
                packed);
    }
}
