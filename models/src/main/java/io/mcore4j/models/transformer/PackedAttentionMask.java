package io.mcore4j.models.transformer;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.contextparallel.ContextParallelSplit;
import io.mcore4j.core.PackedSequences;

import java.util.Arrays;
import java.util.stream.LongStream;

/**
 * The additive attention mask of packed sequences for the composed attention: 0 where a query may
 * attend a key (same sequence of the same column, key at or before the query and, in a layer with a sliding
 * window, at most the window behind it), -10000 elsewhere, the
 * value {@link DotProductAttention#causalMask} uses. Queries and keys are given by their indices in
 * their column, so one rule serves the whole sequence and every pair of context-parallel ranks' tokens.
 */
final class PackedAttentionMask {
    private PackedAttentionMask() {}

    /**
     * The mask of {@code queries} attending {@code keys}.
     *
     * @param manager owner of the result
     * @param packed the micro-batch's sequences
     * @param queries per column, the indices of the query tokens in their column
     * @param keys per column, the indices of the key tokens in their column
     * @param window tokens before a query that it attends, or -1 for all of them
     * @return float32 {@code [b, 1, queries, keys]}, or null when no query may attend any of the keys
     */
    static NDArray of(NDManager manager, PackedSequences packed, long[][] queries, long[][] keys, int window) {
        int b = packed.columns();
        int lq = queries[0].length;
        int lk = keys[0].length;
        float[] mask = new float[b * lq * lk];
        boolean visible = false;
        for (int c = 0; c < b; c++) {
            int[] ids = packed.sequenceIds(c);
            for (int i = 0; i < lq; i++) {
                long q = queries[c][i];
                int row = (c * lq + i) * lk;
                for (int j = 0; j < lk; j++) {
                    long k = keys[c][j];
                    boolean sees = k <= q && (window < 0 || q - k <= window) && ids[(int) k] == ids[(int) q];
                    mask[row + j] = sees ? 0f : -10000f;
                    visible |= sees;
                }
            }
        }
        return visible ? manager.create(mask, new Shape(b, 1, lq, lk)) : null;
    }

    /**
     * The indices in their column of the tokens a context-parallel rank holds, per column.
     *
     * @param split the split of this rank's group
     * @param groupRank the rank whose tokens are meant
     * @param packed the micro-batch's sequences
     * @return per column {@link ContextParallelSplit#tokenIndicesOf}
     */
    static long[][] tokens(ContextParallelSplit split, int groupRank, PackedSequences packed) {
        long[][] out = new long[packed.columns()][];
        for (int c = 0; c < out.length; c++) {
            out[c] = split.tokenIndicesOf(groupRank, packed, c, packed.sequenceLength());
        }
        return out;
    }

    /**
     * The indices in their column of the tokens a ring rank holds, per column, when an all-to-all over
     * {@code gathered} consecutive ranks of the micro-batch's split came first ({@code a2a+p2p}): ring rank
     * {@code j} holds the tokens of split ranks {@code j·gathered … (j+1)·gathered − 1}, in position order
     * (the all-to-all gathers whole columns only).
     *
     * @param dataSplit the split the micro-batch was cut with
     * @param ringRank the ring rank whose tokens are meant
     * @param gathered ranks of {@code dataSplit} per ring rank (1: the ring is over the split's own group)
     * @param packed the micro-batch's sequences
     * @return per column the indices; {@link #tokens(ContextParallelSplit, int, PackedSequences)} when {@code gathered} is 1
     */
    static long[][] tokens(ContextParallelSplit dataSplit, int ringRank, int gathered, PackedSequences packed) {
        if (gathered == 1) {
            return tokens(dataSplit, ringRank, packed);
        }
        long[][] out = new long[packed.columns()][];
        for (int i = 0; i < gathered; i++) {
            long[][] member = tokens(dataSplit, ringRank * gathered + i, packed);
            for (int c = 0; c < out.length; c++) {
                out[c] = out[c] == null ? member[c]
                        : LongStream.concat(Arrays.stream(out[c]), Arrays.stream(member[c])).toArray();
            }
        }
        for (long[] column : out) {
            Arrays.sort(column);
        }
        return out;
    }

    /**
     * The mask of a whole sequence attending itself.
     *
     * @param manager owner of the result
     * @param packed the micro-batch's sequences
     * @param window tokens before a query that it attends, or -1 for all of them
     * @return float32 {@code [b, 1, S, S]}
     */
    static NDArray whole(NDManager manager, PackedSequences packed, int window) {
        long[][] all = tokens(new ContextParallelSplit(1, 0), 0, packed);
        return of(manager, packed, all, all, window);
    }
}
