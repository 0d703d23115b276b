package io.mcore4j.models.transformer;

import ai.djl.ndarray.NDArray;
import io.mcore4j.core.PackedSequences;

/**
 * Where the tokens of a pass sit, when that is not one sequence per batch column at positions
 * {@code 0..S-1}: their position ids (rotary and learned position embeddings read them) and the
 * sequences packed into each column (the attention does not cross from one to the next). Megatron-Core
 * passes the same two things as {@code position_ids} and {@code packed_seq_params}.
 *
 * <p>Under context parallelism {@code positionIds} are this rank's tokens' (split as the micro-batch's
 * other per-token tensors are, {@link io.mcore4j.contextparallel.ContextParallelSplit#split(NDArray,
 * PackedSequences, ai.djl.ndarray.NDManager)}), while {@code sequences} describes the whole micro-batch:
 * the attention derives from it which tokens every rank holds.
 *
 * @param positionIds int64 {@code [s, b]} position ids of this rank's tokens, or null for their
 *     positions in the column
 * @param sequences the micro-batch's packed sequences, or null for one sequence per column
 */
public record TokenPositions(NDArray positionIds, PackedSequences sequences) {
    /** One causal sequence per column, at positions {@code 0..S-1}. */
    public static final TokenPositions DEFAULT = new TokenPositions(null, null);

    /** @return whether this is {@link #DEFAULT}'s layout */
    public boolean isDefault() {
        return positionIds == null && sequences == null;
    }
}
