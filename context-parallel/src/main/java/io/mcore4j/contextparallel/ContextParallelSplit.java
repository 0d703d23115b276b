package io.mcore4j.contextparallel;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDArrays;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.PackedSequences;
import io.mcore4j.parallel.Communicator;

import java.util.ArrayList;
import java.util.List;

/**
 * Which tokens of a sequence one context-parallel rank holds: Megatron-Core's load-balanced split
 * for causal attention ({@code get_batch_on_this_cp_rank}). The sequence of length {@code S} is cut
 * into {@code 2·CP} equal chunks and rank {@code i} holds chunks {@code i} and {@code 2·CP−1−i}, in
 * that order, so every rank has the same share of the causal attention's work (an early chunk
 * attends to few keys, its partner late chunk to many).
 *
 * <p>The same split applies to every per-token tensor of a micro-batch (tokens, labels, loss mask,
 * position ids) through {@link #split}; the model derives the global positions of its local tokens
 * from {@link #positions} for rotary and learned position embeddings and for the causal mask. With
 * a group of one the split is the identity. Immutable; communicates nothing.
 *
 * <p>A micro-batch of {@link PackedSequences} whose every sequence's length is a multiple of
 * {@code 2·CP} is split per sequence, as Megatron-Core splits the THD format
 * ({@code thd_get_partitioned_indices}): each sequence is cut into {@code 2·CP} chunks and rank
 * {@code i} holds chunks {@code i} and {@code 2·CP−1−i} of every sequence, sequence by sequence
 * ({@link #splitsPerSequence}, {@link #tokenIndicesOf}); packed fine-tuning data pads its sequences so.
 * Other packings (the documents of pretraining windows) keep the split of the whole column, as
 * Megatron's {@code get_batch_on_this_cp_rank} splits such a batch and its attention mask.
 *
 * @param size the context-parallel size
 * @param rank this rank's index in the context-parallel group
 */
public record ContextParallelSplit(int size, int rank) {

    /**
     * Validates the sizes.
     *
     * @throws IllegalArgumentException if {@code size < 1} or {@code rank} is outside {@code [0, size)}
     */
    public ContextParallelSplit {
        if (size < 1) {
            throw new IllegalArgumentException("context parallel size must be at least 1, got " + size);
        }
        if (rank < 0 || rank >= size) {
            throw new IllegalArgumentException("context parallel rank " + rank + " is outside [0, " + size + ")");
        }
    }

    /**
     * The split of this rank of a context-parallel group.
     *
     * @param cp the context-parallel communicator
     * @return the split for {@code cp.rank()} of {@code cp.size()}
     */
    public static ContextParallelSplit of(Communicator cp) {
        return new ContextParallelSplit(cp.size(), cp.rank());
    }

    /**
     * Refuses a sequence length the split cannot cut into {@code 2·CP} equal chunks.
     *
     * @param sequenceLength the whole sequence's length {@code S}
     * @throws IllegalArgumentException naming the length and the context-parallel size
     */
    public void checkSequenceLength(long sequenceLength) {
        if (sequenceLength < 1) {
            throw new IllegalArgumentException("sequence length must be positive, got " + sequenceLength);
        }
        if (size > 1 && sequenceLength % (2L * size) != 0) {
            throw new IllegalArgumentException("sequence length " + sequenceLength + " is not divisible by 2 x context parallel size "
                    + size + " = " + 2L * size + " (the load-balanced causal split cuts the sequence into 2·CP equal chunks)");
        }
    }

    /**
     * @param sequenceLength the whole sequence's length {@code S}
     * @return the number of tokens each rank holds, {@code S / CP}
     * @throws IllegalArgumentException if the length cannot be split ({@link #checkSequenceLength})
     */
    public long localLength(long sequenceLength) {
        checkSequenceLength(sequenceLength);
        return sequenceLength / size;
    }

    /**
     * The whole sequence's length from the number of tokens one rank holds.
     *
     * @param localLength tokens on this rank
     * @return {@code localLength · CP}
     * @throws IllegalArgumentException if {@code localLength} is odd while {@code CP > 1}
     */
    public long sequenceLength(long localLength) {
        long s = localLength * size;
        checkSequenceLength(s);
        return s;
    }

    /**
     * Global positions of this rank's tokens, in the order the rank holds them.
     *
     * @param sequenceLength the whole sequence's length {@code S}
     * @return {@code S / CP} positions: chunk {@code rank}, then chunk {@code 2·CP−1−rank}
     * @throws IllegalArgumentException if the length cannot be split
     */
    public long[] positions(long sequenceLength) {
        return positionsOf(rank, sequenceLength);
    }

    /**
     * Global positions of the tokens of every rank concatenated in rank order: the order in which
     * an all-gather over the context-parallel group returns them.
     *
     * @param sequenceLength the whole sequence's length {@code S}
     * @return {@code S} positions
     * @throws IllegalArgumentException if the length cannot be split
     */
    public long[] gatheredPositions(long sequenceLength) {
        long local = localLength(sequenceLength);
        long[] out = new long[Math.toIntExact(sequenceLength)];
        for (int r = 0; r < size; r++) {
            System.arraycopy(positionsOf(r, sequenceLength), 0, out, Math.toIntExact(r * local), Math.toIntExact(local));
        }
        return out;
    }

    /**
     * Global positions of another rank's tokens.
     *
     * @param groupRank a rank of the context-parallel group
     * @param sequenceLength the whole sequence's length
     * @return that rank's {@code S / CP} positions
     */
    public long[] positionsOf(int groupRank, long sequenceLength) {
        if (groupRank < 0 || groupRank >= size) {
            throw new IllegalArgumentException("context parallel rank " + groupRank + " is outside [0, " + size + ")");
        }
        long local = localLength(sequenceLength);
        long[] out = new long[Math.toIntExact(local)];
        if (size == 1) {
            for (int i = 0; i < out.length; i++) {
                out[i] = i;
            }
            return out;
        }
        long chunk = local / 2;
        long first = groupRank * chunk;
        long second = (2L * size - 1 - groupRank) * chunk;
        for (int i = 0; i < chunk; i++) {
            out[i] = first + i;
            out[(int) chunk + i] = second + i;
        }
        return out;
    }

    /**
     * Whether this split cuts packed sequences one by one (each into {@code 2·CP} chunks) rather than
     * the whole column.
     *
     * @param packed the micro-batch's sequences, or null for one sequence per column
     * @return true when {@code CP > 1} and every sequence's length is a multiple of {@code 2·CP}
     */
    public boolean splitsPerSequence(PackedSequences packed) {
        return size > 1 && packed != null && packed.lengthsDivisibleBy(2 * size);
    }

    /**
     * Indices within their column of the tokens one rank holds, in the order it holds them.
     *
     * @param groupRank a rank of the context-parallel group
     * @param packed the micro-batch's sequences, or null for one sequence per column
     * @param column the batch column (ignored without packed sequences)
     * @param sequenceLength the column's length {@code S}
     * @return {@code S / CP} indices: per sequence ({@link #splitsPerSequence}) chunks {@code rank} and
     *     {@code 2·CP−1−rank} of each sequence in turn, else {@link #positionsOf}
     * @throws IllegalArgumentException if the length cannot be split, or differs from the packing's
     */
    public long[] tokenIndicesOf(int groupRank, PackedSequences packed, int column, long sequenceLength) {
        if (packed != null && packed.sequenceLength() != sequenceLength) {
            throw new IllegalArgumentException("sequence length " + sequenceLength + " differs from the packed sequences' "
                    + packed.sequenceLength());
        }
        if (!splitsPerSequence(packed)) {
            return positionsOf(groupRank, sequenceLength);
        }
        if (groupRank < 0 || groupRank >= size) {
            throw new IllegalArgumentException("context parallel rank " + groupRank + " is outside [0, " + size + ")");
        }
        int[] offsets = packed.offsets(column);
        long[] out = new long[Math.toIntExact(localLength(sequenceLength))];
        int n = 0;
        for (int i = 0; i + 1 < offsets.length; i++) {
            int chunk = (offsets[i + 1] - offsets[i]) / (2 * size);
            for (long start : new long[] {offsets[i] + (long) groupRank * chunk, offsets[i] + (2L * size - 1 - groupRank) * chunk}) {
                for (int t = 0; t < chunk; t++) {
                    out[n++] = start + t;
                }
            }
        }
        return out;
    }

    /**
     * This rank's part of a per-token tensor {@code [S, b]} (tokens, labels, loss mask, position ids)
     * of a micro-batch of packed sequences: per sequence where {@link #splitsPerSequence}, else as
     * {@link #split(NDArray, int, NDManager)} splits the whole column.
     *
     * @param x the whole micro-batch's tensor, sequence-first {@code [S, b]}
     * @param packed its sequences, or null for one sequence per column
     * @param owner owner of the result (a new tensor; {@code x} is not modified)
     * @return {@code [S / CP, b]}
     * @throws IllegalArgumentException if the shape does not match the packing or cannot be split
     */
    public NDArray split(NDArray x, PackedSequences packed, NDManager owner) {
        if (!splitsPerSequence(packed)) {
            return split(x, 0, owner);
        }
        Shape shape = x.getShape();
        if (shape.dimension() != 2 || shape.get(1) != packed.columns()) {
            throw new IllegalArgumentException("a per-token tensor of " + packed.columns() + " packed columns is [S, "
                    + packed.columns() + "], got " + shape);
        }
        long s = shape.get(0);
        int b = packed.columns();
        long local = localLength(s);
        long[] index = new long[Math.toIntExact(local * b)];
        for (int c = 0; c < b; c++) {
            long[] mine = tokenIndicesOf(rank, packed, c, s);
            for (int t = 0; t < local; t++) {
                index[t * b + c] = mine[t];
            }
        }
        try (NDManager temp = owner.newSubManager(x.getDevice())) {
            NDArray out = x.gather(temp.create(index, new Shape(local, b)), 0);
            out.attach(owner);
            return out;
        }
    }

    /**
     * Position ids of this rank's tokens as an int64 tensor.
     *
     * @param manager owner of the result
     * @param sequenceLength the whole sequence's length
     * @return int64 {@code [S / CP]}
     */
    public NDArray positionIds(NDManager manager, long sequenceLength) {
        return manager.create(positions(sequenceLength));
    }

    /**
     * This rank's part of a per-token tensor of the whole sequence: chunks {@code rank} and
     * {@code 2·CP−1−rank} of {@code dim}, concatenated. Works for tokens, labels, loss masks and
     * position ids alike, sequence-first ({@code [s, b]}, dim 0) or batch-first ({@code [b, s]}, dim 1).
     *
     * @param x the whole sequence's tensor
     * @param dim the sequence dim
     * @param owner owner of the result (a new tensor; {@code x} is not modified)
     * @return {@code x} with {@code dim} of size {@code S / CP}; a copy of {@code x} when {@code CP = 1}
     * @throws IllegalArgumentException if the sequence dim cannot be split
     */
    public NDArray split(NDArray x, int dim, NDManager owner) {
        Shape shape = x.getShape();
        int d = dim < 0 ? dim + shape.dimension() : dim;
        if (d < 0 || d >= shape.dimension()) {
            throw new IllegalArgumentException("sequence dim " + dim + " is outside the " + shape.dimension()
                    + " dims of shape " + shape);
        }
        long s = shape.get(d);
        checkSequenceLength(s);
        try (NDManager temp = owner.newSubManager()) {
            NDArray source = x.duplicate();
            source.attach(temp);
            NDArray out;
            if (size == 1) {
                out = source;
            } else {
                long chunk = s / (2L * size);
                List<long[]> runs = new ArrayList<>();
                runs.add(new long[] {rank * chunk, (rank + 1) * chunk});
                runs.add(new long[] {(2L * size - 1 - rank) * chunk, (2L * size - rank) * chunk});
                out = slices(source, d, runs);
            }
            out.attach(owner);
            return out;
        }
    }

    /**
     * The maximal runs of consecutive values of {@code positions}, as {@code [start, end)} pairs:
     * a model reads learned position embeddings as slices of its table.
     *
     * @param positions positions in order
     * @return the runs, in order
     */
    public static List<long[]> runs(long[] positions) {
        List<long[]> out = new ArrayList<>();
        int i = 0;
        while (i < positions.length) {
            int j = i + 1;
            while (j < positions.length && positions[j] == positions[j - 1] + 1) {
                j++;
            }
            out.add(new long[] {positions[i], positions[j - 1] + 1});
            i = j;
        }
        return out;
    }

    /**
     * The slices {@code runs} of {@code x} along {@code dim}, concatenated; owned by {@code x}'s
     * manager (a view when there is one run).
     *
     * @param x the tensor
     * @param dim the dim to slice
     * @param runs {@code [start, end)} pairs
     * @return the concatenation
     */
    public static NDArray slices(NDArray x, int dim, List<long[]> runs) {
        NDList parts = new NDList(runs.size());
        for (long[] run : runs) {
            parts.add(x.get(index(dim, run[0], run[1])));
        }
        if (parts.size() == 1) {
            return parts.get(0);
        }
        NDArray out = NDArrays.concat(parts, dim);
        parts.close();
        return out;
    }

    private static String index(int dim, long start, long end) {
        return ":, ".repeat(dim) + start + ":" + end;
    }

    @Override
    public String toString() {
        return "ContextParallelSplit{rank " + rank + " of " + size + "}";
    }
}
