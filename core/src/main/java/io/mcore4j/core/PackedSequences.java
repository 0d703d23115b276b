package io.mcore4j.core;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;

import java.util.Arrays;
import java.util.List;

/**
 * Several sequences packed one after another into each column of a micro-batch (Megatron-Core's
 * {@code PackedSeqParams}): a token attends only to earlier tokens of its own sequence, and its
 * position restarts at 0 where its sequence starts. The description is host data, the cumulative
 * sequence lengths of every batch column; {@link #cumulativeLengths()} gives them in the THD layout
 * of variable-length attention kernels ({@code cu_seqlens}), the columns one after another.
 *
 * <p>Made from explicit sequence lengths ({@link #ofLengths}, e.g. conversations packed for
 * fine-tuning; trailing padding is a sequence of its own, with loss mask 0), or from the
 * end-of-document tokens of pretraining data ({@link #ofDocuments}, Megatron's
 * {@code --reset-attention-mask}: the EOD token belongs to the sequence it ends). Immutable; the
 * arrays it is given are copied and those it returns are copies.
 *
 * @param offsets per batch column, its cumulative sequence lengths {@code [0, l0, l0+l1, ..., S]};
 *     every column ends at the same {@code S}
 */
public record PackedSequences(int[][] offsets) {

    /**
     * Validates the offsets.
     *
     * @throws IllegalArgumentException naming the column and the offset that is wrong: a column that
     *     does not start at 0, a sequence of no tokens, or columns of different lengths
     */
    public PackedSequences {
        if (offsets == null || offsets.length == 0) {
            throw new IllegalArgumentException("packed sequences need at least one batch column");
        }
        int[][] copy = new int[offsets.length][];
        for (int c = 0; c < offsets.length; c++) {
            int[] o = offsets[c];
            if (o == null || o.length < 2) {
                throw new IllegalArgumentException("column " + c + " has no sequence: its offsets are "
                        + Arrays.toString(o) + " (at least [0, S])");
            }
            if (o[0] != 0) {
                throw new IllegalArgumentException("column " + c + ": offset 0 is " + o[0] + ", not 0");
            }
            for (int i = 1; i < o.length; i++) {
                if (o[i] <= o[i - 1]) {
                    throw new IllegalArgumentException("column " + c + ": offset " + i + " is " + o[i] + ", not after offset "
                            + (i - 1) + " (" + o[i - 1] + "): every sequence holds at least one token");
                }
            }
            int end = o[o.length - 1];
            int first = c == 0 ? end : copy[0][copy[0].length - 1];
            if (end != first) {
                throw new IllegalArgumentException("column " + c + " ends at offset " + end + ", column 0 at " + first
                        + ": every column of a micro-batch holds the same number of tokens");
            }
            copy[c] = o.clone();
        }
        offsets = copy;
    }

    /**
     * Sequences of the given lengths, packed in order.
     *
     * @param lengths per batch column, the lengths of its sequences in order; each column's sum is the
     *     micro-batch's sequence length (give trailing padding as a sequence of its own)
     * @return the description
     * @throws IllegalArgumentException naming the column and sequence whose length is not positive, or
     *     the column whose lengths sum to another total than column 0's
     */
    public static PackedSequences ofLengths(int[]... lengths) {
        if (lengths == null || lengths.length == 0) {
            throw new IllegalArgumentException("packed sequences need at least one batch column");
        }
        int[][] offsets = new int[lengths.length][];
        for (int c = 0; c < lengths.length; c++) {
            int[] l = lengths[c];
            if (l == null || l.length == 0) {
                throw new IllegalArgumentException("column " + c + " has no sequence lengths");
            }
            offsets[c] = new int[l.length + 1];
            for (int i = 0; i < l.length; i++) {
                if (l[i] < 1) {
                    throw new IllegalArgumentException("column " + c + ": sequence " + i + " has length " + l[i]
                            + " (at least 1)");
                }
                offsets[c][i + 1] = Math.addExact(offsets[c][i], l[i]);
            }
        }
        return new PackedSequences(offsets);
    }

    /**
     * Sequences of the given lengths (see {@link #ofLengths(int[]...)}).
     *
     * @param lengths per batch column, the lengths of its sequences
     * @return the description
     */
    public static PackedSequences ofLengths(List<int[]> lengths) {
        return ofLengths(lengths.toArray(new int[0][]));
    }

    /**
     * The documents of pretraining windows, as Megatron's {@code get_ltor_masks_and_position_ids}
     * separates them under {@code --reset-attention-mask}: a new sequence starts after every
     * end-of-document token except one in a column's last position (the EOD belongs to the sequence it ends).
     *
     * @param eod the end-of-document id
     * @param tokens per batch column, its input tokens (all of the same length)
     * @return the description
     * @throws IllegalArgumentException if the columns differ in length or are empty
     */
    public static PackedSequences ofDocuments(int eod, int[]... tokens) {
        int[][] offsets = new int[tokens.length][];
        for (int c = 0; c < tokens.length; c++) {
            int[] t = tokens[c];
            int[] o = new int[t.length + 1];
            int n = 1;
            for (int i = 0; i + 1 < t.length; i++) {
                if (t[i] == eod) {
                    o[n++] = i + 1;
                }
            }
            o[n++] = t.length;
            offsets[c] = Arrays.copyOf(o, n);
        }
        return new PackedSequences(offsets);
    }

    /** @return a copy of every column's offsets */
    @Override
    public int[][] offsets() {
        int[][] out = new int[offsets.length][];
        for (int c = 0; c < out.length; c++) {
            out[c] = offsets[c].clone();
        }
        return out;
    }

    /** @return the number of batch columns {@code b} */
    public int columns() {
        return offsets.length;
    }

    /** @return the tokens of every column {@code S} */
    public int sequenceLength() {
        return offsets[0][offsets[0].length - 1];
    }

    /**
     * @param column a batch column
     * @return the number of sequences packed into it
     */
    public int count(int column) {
        return offsets[column].length - 1;
    }

    /**
     * @param column a batch column
     * @return its cumulative sequence lengths {@code [0, ..., S]} (a copy)
     */
    public int[] offsets(int column) {
        return offsets[column].clone();
    }

    /**
     * @param column a batch column
     * @return the lengths of its sequences, in order
     */
    public int[] lengths(int column) {
        int[] o = offsets[column];
        int[] out = new int[o.length - 1];
        for (int i = 0; i < out.length; i++) {
            out[i] = o[i + 1] - o[i];
        }
        return out;
    }

    /** @return the longest sequence of any column (the {@code max_seqlen} of variable-length kernels) */
    public int maxLength() {
        int max = 0;
        for (int c = 0; c < offsets.length; c++) {
            for (int l : lengths(c)) {
                max = Math.max(max, l);
            }
        }
        return max;
    }

    /**
     * @param divisor a positive number
     * @return whether every sequence's length is a multiple of it
     */
    public boolean lengthsDivisibleBy(int divisor) {
        for (int c = 0; c < offsets.length; c++) {
            for (int l : lengths(c)) {
                if (l % divisor != 0) {
                    return false;
                }
            }
        }
        return true;
    }

    /**
     * The THD layout's {@code cu_seqlens}: the columns' tokens one after another ({@code [b, S]}
     * flattened), and the offsets of all their sequences in that stream.
     *
     * @return {@code 1 + Σ count(c)} offsets from 0 to {@code b·S}
     */
    public int[] cumulativeLengths() {
        int total = 1;
        for (int c = 0; c < offsets.length; c++) {
            total += count(c);
        }
        int[] out = new int[total];
        int n = 1;
        int s = sequenceLength();
        for (int c = 0; c < offsets.length; c++) {
            for (int i = 1; i < offsets[c].length; i++) {
                out[n++] = c * s + offsets[c][i];
            }
        }
        return out;
    }

    /**
     * @param column a batch column
     * @return for each of its tokens the index of the sequence it belongs to
     */
    public int[] sequenceIds(int column) {
        int[] o = offsets[column];
        int[] out = new int[sequenceLength()];
        for (int i = 0; i + 1 < o.length; i++) {
            Arrays.fill(out, o[i], o[i + 1], i);
        }
        return out;
    }

    /**
     * @param column a batch column
     * @return for each of its tokens its position in its own sequence (0 at each sequence's start)
     */
    public long[] positionIds(int column) {
        int[] o = offsets[column];
        long[] out = new long[sequenceLength()];
        for (int i = 0; i + 1 < o.length; i++) {
            for (int t = o[i]; t < o[i + 1]; t++) {
                out[t] = t - o[i];
            }
        }
        return out;
    }

    /**
     * Position ids of the whole micro-batch, restarting at every sequence's start (Megatron's
     * {@code --reset-position-ids} for the same boundaries).
     *
     * @param manager owner of the result
     * @return int64 {@code [S, b]}, sequence-major like the tokens
     */
    public NDArray positionIds(NDManager manager) {
        int s = sequenceLength();
        int b = columns();
        long[] flat = new long[s * b];
        for (int c = 0; c < b; c++) {
            long[] p = positionIds(c);
            for (int t = 0; t < s; t++) {
                flat[t * b + c] = p[t];
            }
        }
        return manager.create(flat, new Shape(s, b));
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof PackedSequences other && Arrays.deepEquals(offsets, other.offsets);
    }

    @Override
    public int hashCode() {
        return Arrays.deepHashCode(offsets);
    }

    @Override
    public String toString() {
        return "PackedSequences" + Arrays.deepToString(offsets);
    }
}
