package io.mcore4j.contextparallel;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDArrays;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
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
