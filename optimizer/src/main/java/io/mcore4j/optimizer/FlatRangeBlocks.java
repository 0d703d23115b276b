package io.mcore4j.optimizer;

import java.util.ArrayList;
import java.util.List;

/**
 * Splits a range {@code [start, end)} of the row-major flattening of a tensor into rectangular
 * blocks of that tensor, in flat order. The distributed optimizer owns such ranges of parameters;
 * describing them as rectangles lets a checkpoint address them by global offsets, independent of
 * how the flat buffer was sharded. Every block has the form {@code [1, .., 1, k, full, .., full]},
 * so it is contiguous in the flattening and a range yields at most {@code 2 * dims - 1} blocks.
 */
final class FlatRangeBlocks {
    private FlatRangeBlocks() {}

    /**
     * One rectangular block.
     *
     * @param offset where the block starts along each dim
     * @param extent the block's shape
     * @param flatStart its first element in the flattening
     */
    record Block(long[] offset, long[] extent, long flatStart) {
        /** @return number of elements */
        long numel() {
            long n = 1;
            for (long e : extent) {
                n *= e;
            }
            return n;
        }
    }

    /**
     * The blocks covering {@code [start, end)} of a tensor of {@code shape}, in flat order.
     *
     * @param shape the tensor's shape (a 0-d shape holds one element)
     * @param start first flat element
     * @param end one past the last flat element
     * @return the blocks; empty when {@code start == end}
     * @throws IllegalArgumentException if the range lies outside the tensor
     */
    static List<Block> decompose(long[] shape, long start, long end) {
        long numel = 1;
        for (long s : shape) {
            numel *= s;
        }
        if (start < 0 || end > numel || start > end) {
            throw new IllegalArgumentException("range [" + start + ", " + end + ") lies outside a tensor of "
                    + numel + " elements");
        }
        List<Block> out = new ArrayList<>();
        if (start < end) {
            split(shape, 0, new long[shape.length], start, end, 0, out);
        }
        return out;
    }

    /** Appends the blocks of {@code [start, end)} within the sub-tensor at dims {@code dim..}, whose leading offsets are fixed in {@code prefix}. */
    private static void split(long[] shape, int dim, long[] prefix, long start, long end, long base, List<Block> out) {
        if (dim == shape.length) {
            out.add(new Block(prefix.clone(), extent(shape, dim, 0), base + start));
            return;
        }
        long inner = 1;
        for (int d = dim + 1; d < shape.length; d++) {
            inner *= shape[d];
        }
        long firstRow = start / inner;
        long lastRow = end / inner; // exclusive row boundary
        if (firstRow == lastRow) {
            // the range lies inside one row of this dim
            long row = firstRow;
            long[] p = prefix.clone();
            p[dim] = row;
            split(shape, dim + 1, p, start - row * inner, end - row * inner, base + row * inner, out);
            return;
        }
        long row = firstRow;
        if (start % inner != 0) {
            long[] p = prefix.clone();
            p[dim] = row;
            split(shape, dim + 1, p, start - row * inner, inner, base + row * inner, out);
            row++;
        }
        if (lastRow > row) {
            long[] p = prefix.clone();
            p[dim] = row;
            long[] e = extent(shape, dim, lastRow - row);
            out.add(new Block(p, e, base + row * inner));
        }
        if (end % inner != 0) {
            long[] p = prefix.clone();
            p[dim] = lastRow;
            split(shape, dim + 1, p, 0, end - lastRow * inner, base + lastRow * inner, out);
        }
    }

    /** Shape {@code [1 x dim, rows, full dims after dim]}; with {@code dim == shape.length}, all ones. */
    private static long[] extent(long[] shape, int dim, long rows) {
        long[] e = new long[shape.length];
        for (int d = 0; d < shape.length; d++) {
            e[d] = d < dim ? 1 : d == dim ? rows : shape[d];
        }
        return e;
    }
}
