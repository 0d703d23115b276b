package io.mcore4j.parallel.nccl;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.TensorMemory;

/**
 * NCCL's all-gather and reduce-scatter work on rank-major flat buffers: all-gather writes rank
 * {@code r}'s {@code n} elements at {@code [r n, (r + 1) n)}, reduce-scatter gives rank {@code r}
 * the reduction of {@code [r n, (r + 1) n)}. Along dim 0 of a contiguous tensor that is the tensor's
 * own layout and nothing moves. Along another dim {@code d} this class rearranges on the device with
 * libtorch ops (one copy each way, no per-element Java work):
 * <ul>
 *   <li>all-gather: gather into a buffer of shape {@code [size, ...piece]}, move axis 0 to just
 *       before {@code d} (a permutation) and merge it with {@code d} (a reshape, which copies into
 *       a contiguous result);</li>
 *   <li>reduce-scatter: split dim {@code d} into {@code [size, d / size]}, move the {@code size}
 *       axis to the front and copy into a contiguous buffer; each rank's chunk is then a contiguous
 *       tensor of the scattered shape, so NCCL writes the result in place.</li>
 * </ul>
 * The shape and permutation arithmetic is plain Java; the two conversions run on whatever device the
 * array is on (CUDA in production, CPU in unit tests).
 */
final class RankMajorLayout {
    private RankMajorLayout() {}

    /**
     * @param piece shape of every rank's contribution
     * @param size group size
     * @return {@code [size, ...piece]}
     */
    static Shape gatherBuffer(Shape piece, int size) {
        return new Shape(size).addAll(piece);
    }

    /**
     * @param piece shape of every rank's contribution
     * @param dim the dim to concatenate along, in {@code [0, piece.dimension())}
     * @param size group size
     * @return {@code piece} with dim {@code dim} multiplied by {@code size}
     */
    static Shape gathered(Shape piece, int dim, int size) {
        long[] s = piece.getShape().clone(); // DJL hands out its own array
        checkDim(s.length, dim);
        s[dim] = Math.multiplyExact(s[dim], (long) size);
        return new Shape(s);
    }

    /**
     * Axis order that takes the {@code [size, ...piece]} buffer to {@code [piece[0..dim), size, piece[dim..)]}.
     *
     * @param pieceDims number of dims of a piece
     * @param dim the gather dim
     * @return the permutation of {@code pieceDims + 1} axes
     */
    static int[] gatherPermutation(int pieceDims, int dim) {
        checkDim(pieceDims, dim);
        int[] axes = new int[pieceDims + 1];
        for (int i = 0; i < dim; i++) {
            axes[i] = i + 1;
        }
        axes[dim] = 0;
        for (int i = dim + 1; i <= pieceDims; i++) {
            axes[i] = i;
        }
        return axes;
    }

    /**
     * Turns the gathered rank-major buffer into the concatenation along {@code dim}.
     *
     * @param buffer the all-gather output, shape {@link #gatherBuffer}
     * @param piece shape of every rank's contribution
     * @param dim the gather dim
     * @param size group size
     * @param owner manager that owns the result (intermediates are released)
     * @return the concatenation, shape {@link #gathered}
     */
    static NDArray fromGatherBuffer(NDArray buffer, Shape piece, int dim, int size, NDManager owner) {
        Shape out = gathered(piece, dim, size);
        if (dim == 0) {
            NDArray r = buffer.reshape(out);
            r.attach(owner);
            return r;
        }
        try (NDManager temp = owner.newSubManager()) {
            NDArray moved = buffer.transpose(gatherPermutation(piece.dimension(), dim));
            moved.attach(temp);
            NDArray r = moved.reshape(out);
            r.attach(owner);
            return r;
        }
    }

    /**
     * @param input shape of this rank's contribution
     * @param dim the scatter dim; its size must be divisible by {@code size}
     * @param size group size
     * @return {@code input} with dim {@code dim} divided by {@code size}
     */
    static Shape scattered(Shape input, int dim, int size) {
        long[] s = input.getShape().clone();
        checkDim(s.length, dim);
        if (s[dim] % size != 0) {
            throw new IllegalArgumentException("dim " + dim + " of shape " + input + " is not divisible by the group size " + size);
        }
        s[dim] /= size;
        return new Shape(s);
    }

    /**
     * @param input shape of this rank's contribution
     * @param dim the scatter dim
     * @param size group size
     * @return {@code input} with dim {@code dim} split into {@code [size, input[dim] / size]}
     */
    static Shape scatterSplit(Shape input, int dim, int size) {
        long[] chunk = scattered(input, dim, size).getShape();
        long[] s = new long[chunk.length + 1];
        System.arraycopy(chunk, 0, s, 0, dim);
        s[dim] = size;
        System.arraycopy(chunk, dim, s, dim + 1, chunk.length - dim);
        return new Shape(s);
    }

    /**
     * Axis order that takes the split shape to {@code [size, ...chunk]}.
     *
     * @param inputDims number of dims of the input
     * @param dim the scatter dim
     * @return the permutation of {@code inputDims + 1} axes
     */
    static int[] scatterPermutation(int inputDims, int dim) {
        checkDim(inputDims, dim);
        int[] axes = new int[inputDims + 1];
        axes[0] = dim;
        for (int i = 0; i < dim; i++) {
            axes[i + 1] = i;
        }
        for (int i = dim + 1; i <= inputDims; i++) {
            axes[i] = i;
        }
        return axes;
    }

    /**
     * A rank-major copy of {@code input} for reduce-scatter along {@code dim != 0}: chunk {@code r}
     * along {@code dim} becomes the contiguous block {@code r}.
     *
     * @param input this rank's contribution
     * @param dim the scatter dim, not 0
     * @param size group size
     * @param owner manager that owns the result (intermediates are released)
     * @return a contiguous tensor of shape {@code [size, ...chunk]}
     */
    static NDArray toScatterBuffer(NDArray input, int dim, int size, NDManager owner) {
        Shape split = scatterSplit(input.getShape(), dim, size);
        try (NDManager temp = owner.newSubManager()) {
            NDArray view = input.reshape(split);
            view.attach(temp);
            NDArray moved = view.transpose(scatterPermutation(input.getShape().dimension(), dim));
            moved.attach(temp);
            NDArray r = TensorMemory.contiguous(moved, owner);
            if (r == moved) {
                r.attach(owner);
            }
            return r;
        }
    }

    private static void checkDim(int dims, int dim) {
        if (dim < 0 || dim >= dims) {
            throw new IllegalArgumentException("dim " + dim + " is outside [0, " + dims + ")");
        }
    }
}
