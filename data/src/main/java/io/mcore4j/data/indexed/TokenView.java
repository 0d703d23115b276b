package io.mcore4j.data.indexed;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * A window of consecutive tokens of a {@code .bin} file.
 *
 * <p>The window usually shares the memory map of its reader (no copy) and stays valid only while the reader
 * is open. Element accessors take an index in {@code [0, length())}.
 */
public final class TokenView {
    private final ByteBuffer bytes;
    private final DType dtype;
    private final int length;

    /**
     * Wraps a little-endian buffer holding {@code length} elements from position 0.
     *
     * @param bytes the buffer; its byte order is forced to little-endian
     * @param dtype element type
     * @param length number of elements
     */
    public TokenView(ByteBuffer bytes, DType dtype, int length) {
        if (length < 0 || (long) length * dtype.size() > bytes.capacity()) {
            throw new IllegalArgumentException("length " + length + " of " + dtype + " does not fit a buffer of " + bytes.capacity() + " bytes");
        }
        this.bytes = bytes.order(ByteOrder.LITTLE_ENDIAN);
        this.dtype = dtype;
        this.length = length;
    }

    /**
     * Element type.
     *
     * @return the dtype
     */
    public DType dtype() {
        return dtype;
    }

    /**
     * Number of elements.
     *
     * @return the length
     */
    public int length() {
        return length;
    }

    /**
     * One element as a long (floating values truncated).
     *
     * @param index element index
     * @return the value
     */
    public long getLong(int index) {
        return dtype.getLong(bytes, byteIndex(index));
    }

    /**
     * One element as a double.
     *
     * @param index element index
     * @return the value
     */
    public double getDouble(int index) {
        return dtype.getDouble(bytes, byteIndex(index));
    }

    /**
     * One element as an int token id.
     *
     * @param index element index
     * @return the value
     * @throws ArithmeticException if an int64 value does not fit an int
     * @throws UnsupportedOperationException for floating-point data
     */
    public int getInt(int index) {
        requireIntegers();
        return Math.toIntExact(dtype.getLong(bytes, byteIndex(index)));
    }

    /**
     * A read-only little-endian view of the raw bytes, position 0, limit {@code length() * dtype().size()}.
     *
     * @return the bytes (not copied)
     */
    public ByteBuffer buffer() {
        return bytes.asReadOnlyBuffer().order(ByteOrder.LITTLE_ENDIAN).limit(length * dtype.size());
    }

    /**
     * Copies the elements into an int array.
     *
     * @param destination target array
     * @param position first index written
     * @throws ArithmeticException if an int64 value does not fit an int
     * @throws UnsupportedOperationException for floating-point data
     */
    public void copyTo(int[] destination, int position) {
        requireIntegers();
        if (position < 0 || position > destination.length - length) {
            throw new IndexOutOfBoundsException("cannot copy " + length + " tokens to position " + position + " of an array of " + destination.length);
        }
        switch (dtype) {
            case UINT16 -> {
                for (int k = 0; k < length; k++) {
                    destination[position + k] = bytes.getShort(2 * k) & 0xFFFF;
                }
            }
            case INT32 -> bytes.duplicate().order(ByteOrder.LITTLE_ENDIAN).position(0).limit(4 * length).asIntBuffer()
                    .get(destination, position, length);
            default -> {
                for (int k = 0; k < length; k++) {
                    destination[position + k] = Math.toIntExact(dtype.getLong(bytes, k * dtype.size()));
                }
            }
        }
    }

    /**
     * The elements as a new int array.
     *
     * @return the token ids
     */
    public int[] toIntArray() {
        int[] out = new int[length];
        copyTo(out, 0);
        return out;
    }

    /**
     * The elements as a new long array (floating values truncated).
     *
     * @return the values
     */
    public long[] toLongArray() {
        long[] out = new long[length];
        for (int k = 0; k < length; k++) {
            out[k] = getLong(k);
        }
        return out;
    }

    /**
     * The elements as a new double array.
     *
     * @return the values
     */
    public double[] toDoubleArray() {
        double[] out = new double[length];
        for (int k = 0; k < length; k++) {
            out[k] = getDouble(k);
        }
        return out;
    }

    private int byteIndex(int index) {
        if (index < 0 || index >= length) {
            throw new IndexOutOfBoundsException("token " + index + " is outside a window of " + length);
        }
        return index * dtype.size();
    }

    private void requireIntegers() {
        if (dtype.isFloatingPoint()) {
            throw new UnsupportedOperationException(dtype + " data has no integer token ids");
        }
    }
}
