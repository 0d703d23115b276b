package io.mcore4j.checkpoint;

import java.util.Arrays;

/**
 * A rectangular block of a global tensor: start offset and extent along each dim. A box with no
 * dims (a scalar) has volume 1.
 */
record Box(long[] offset, long[] shape) {
    Box {
        offset = offset.clone();
        shape = shape.clone();
        if (offset.length != shape.length) {
            throw new IllegalArgumentException("offset " + Arrays.toString(offset) + " and shape "
                    + Arrays.toString(shape) + " have different numbers of dims");
        }
    }

    int dims() {
        return shape.length;
    }

    long offset(int d) {
        return offset[d];
    }

    long size(int d) {
        return shape[d];
    }

    long end(int d) {
        return offset[d] + shape[d];
    }

    @Override
    public long[] offset() {
        return offset.clone();
    }

    @Override
    public long[] shape() {
        return shape.clone();
    }

    /** @return number of elements; throws ArithmeticException on overflow */
    long volume() {
        long v = 1;
        for (long s : shape) {
            v = Math.multiplyExact(v, s);
        }
        return v;
    }

    boolean isEmpty() {
        for (long s : shape) {
            if (s == 0) {
                return true;
            }
        }
        return false;
    }

    /** @return whether this box lies inside {@code [0, globalShape)} */
    boolean fitsIn(long[] globalShape) {
        if (globalShape.length != shape.length) {
            return false;
        }
        for (int d = 0; d < shape.length; d++) {
            if (offset[d] < 0 || shape[d] < 0 || offset[d] + shape[d] > globalShape[d]) {
                return false;
            }
        }
        return true;
    }

    /** @return whether the two boxes share at least one element */
    boolean overlaps(Box other) {
        if (isEmpty() || other.isEmpty()) {
            return false;
        }
        for (int d = 0; d < shape.length; d++) {
            if (offset[d] >= other.end(d) || other.offset[d] >= end(d)) {
                return false;
            }
        }
        return true;
    }

    /** @return the common block, or null if the boxes do not overlap */
    Box intersect(Box other) {
        if (!overlaps(other)) {
            return null;
        }
        long[] o = new long[shape.length];
        long[] s = new long[shape.length];
        for (int d = 0; d < shape.length; d++) {
            o[d] = Math.max(offset[d], other.offset[d]);
            s[d] = Math.min(end(d), other.end(d)) - o[d];
        }
        return new Box(o, s);
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof Box b && Arrays.equals(offset, b.offset) && Arrays.equals(shape, b.shape);
    }

    @Override
    public int hashCode() {
        return 31 * Arrays.hashCode(offset) + Arrays.hashCode(shape);
    }

    @Override
    public String toString() {
        StringBuilder b = new StringBuilder("[");
        for (int d = 0; d < shape.length; d++) {
            b.append(d == 0 ? "" : ", ").append(offset[d]).append(':').append(end(d));
        }
        return b.append(']').toString();
    }
}
