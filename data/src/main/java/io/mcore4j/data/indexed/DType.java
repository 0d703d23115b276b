package io.mcore4j.data.indexed;

import java.nio.ByteBuffer;
import java.util.Locale;

/**
 * Element type of the tokens in a {@code .bin} file, with the numeric code that Megatron's {@code .idx}
 * header stores for it.
 *
 * <p>Buffers passed to the accessors must be little-endian; positions are byte positions.
 */
public enum DType {
    /** Unsigned 8-bit integer, code 1. */
    UINT8(1, 1),
    /** Signed 8-bit integer, code 2. */
    INT8(2, 1),
    /** Signed 16-bit integer, code 3. */
    INT16(3, 2),
    /** Signed 32-bit integer, code 4. */
    INT32(4, 4),
    /** Signed 64-bit integer, code 5. */
    INT64(5, 8),
    /** IEEE 754 double, code 6. */
    FLOAT64(6, 8),
    /** IEEE 754 float, code 7. */
    FLOAT32(7, 4),
    /** Unsigned 16-bit integer, code 8. */
    UINT16(8, 2);

    /** Largest vocabulary whose ids (0 to size - 1) all fit {@link #UINT16}. */
    public static final long UINT16_VOCABULARY_LIMIT = 1L << 16;

    private final int code;
    private final int size;

    DType(int code, int size) {
        this.code = code;
        this.size = size;
    }

    /**
     * The code stored in the {@code .idx} header.
     *
     * @return 1 to 8
     */
    public int code() {
        return code;
    }

    /**
     * Bytes per element.
     *
     * @return 1, 2, 4 or 8
     */
    public int size() {
        return size;
    }

    /**
     * Whether the type holds floating-point values.
     *
     * @return true for {@link #FLOAT32} and {@link #FLOAT64}
     */
    public boolean isFloatingPoint() {
        return this == FLOAT32 || this == FLOAT64;
    }

    /**
     * Looks a type up by its header code.
     *
     * @param code the code read from a header
     * @return the type
     * @throws IllegalArgumentException if no type has this code, naming the code
     */
    public static DType fromCode(int code) {
        for (DType t : values()) {
            if (t.code == code) {
                return t;
            }
        }
        throw new IllegalArgumentException("dtype code " + code + " is unknown (expected 1-8)");
    }

    /**
     * The smallest token type that holds every id of a vocabulary: {@link #UINT16} when the ids 0 to
     * {@code vocabularySize - 1} fit in 16 unsigned bits, else {@link #INT32}. (Megatron switches at 65,500;
     * the ids of a 65,500-65,536 vocabulary fit uint16 all the same.)
     *
     * @param vocabularySize number of token ids
     * @return UINT16 or INT32
     * @throws IllegalArgumentException if the size is not positive or exceeds the int32 range
     */
    public static DType smallestFor(long vocabularySize) {
        if (vocabularySize <= 0 || vocabularySize > (long) Integer.MAX_VALUE + 1) {
            throw new IllegalArgumentException("vocabulary size " + vocabularySize + " must be in 1.." + ((long) Integer.MAX_VALUE + 1));
        }
        return vocabularySize <= UINT16_VOCABULARY_LIMIT ? UINT16 : INT32;
    }

    /**
     * Smallest integer value the type holds.
     *
     * @return the minimum (for floating types, {@link Long#MIN_VALUE})
     */
    public long minValue() {
        return switch (this) {
            case UINT8, UINT16 -> 0;
            case INT8 -> Byte.MIN_VALUE;
            case INT16 -> Short.MIN_VALUE;
            case INT32 -> Integer.MIN_VALUE;
            case INT64, FLOAT32, FLOAT64 -> Long.MIN_VALUE;
        };
    }

    /**
     * Largest integer value the type holds.
     *
     * @return the maximum (for floating types, {@link Long#MAX_VALUE})
     */
    public long maxValue() {
        return switch (this) {
            case UINT8 -> 0xFF;
            case UINT16 -> 0xFFFF;
            case INT8 -> Byte.MAX_VALUE;
            case INT16 -> Short.MAX_VALUE;
            case INT32 -> Integer.MAX_VALUE;
            case INT64, FLOAT32, FLOAT64 -> Long.MAX_VALUE;
        };
    }

    /**
     * Reads one element as a long (floating values are truncated toward zero).
     *
     * @param buffer little-endian buffer
     * @param bytePosition absolute position of the element
     * @return the value
     */
    public long getLong(ByteBuffer buffer, int bytePosition) {
        return switch (this) {
            case UINT8 -> buffer.get(bytePosition) & 0xFFL;
            case INT8 -> buffer.get(bytePosition);
            case INT16 -> buffer.getShort(bytePosition);
            case UINT16 -> buffer.getShort(bytePosition) & 0xFFFFL;
            case INT32 -> buffer.getInt(bytePosition);
            case INT64 -> buffer.getLong(bytePosition);
            case FLOAT32 -> (long) buffer.getFloat(bytePosition);
            case FLOAT64 -> (long) buffer.getDouble(bytePosition);
        };
    }

    /**
     * Reads one element as a double.
     *
     * @param buffer little-endian buffer
     * @param bytePosition absolute position of the element
     * @return the value
     */
    public double getDouble(ByteBuffer buffer, int bytePosition) {
        return switch (this) {
            case FLOAT32 -> buffer.getFloat(bytePosition);
            case FLOAT64 -> buffer.getDouble(bytePosition);
            default -> getLong(buffer, bytePosition);
        };
    }

    /**
     * Writes one integer element at the buffer's position and advances it.
     *
     * @param buffer little-endian buffer with room for {@link #size()} bytes
     * @param value the value
     * @throws IllegalArgumentException if an integer type cannot hold the value
     */
    public void putLong(ByteBuffer buffer, long value) {
        if (!isFloatingPoint() && (value < minValue() || value > maxValue())) {
            throw new IllegalArgumentException("value " + value + " does not fit " + this + " (" + minValue() + ".." + maxValue() + ")");
        }
        switch (this) {
            case UINT8, INT8 -> buffer.put((byte) value);
            case INT16, UINT16 -> buffer.putShort((short) value);
            case INT32 -> buffer.putInt((int) value);
            case INT64 -> buffer.putLong(value);
            case FLOAT32 -> buffer.putFloat(value);
            case FLOAT64 -> buffer.putDouble(value);
        }
    }

    /**
     * Writes one floating-point element at the buffer's position and advances it.
     *
     * @param buffer little-endian buffer with room for {@link #size()} bytes
     * @param value the value
     * @throws IllegalArgumentException if the type is an integer type (values would be silently rounded)
     */
    public void putDouble(ByteBuffer buffer, double value) {
        switch (this) {
            case FLOAT32 -> buffer.putFloat((float) value);
            case FLOAT64 -> buffer.putDouble(value);
            default -> throw new IllegalArgumentException("cannot store floating-point value " + value + " as " + this);
        }
    }

    @Override
    public String toString() {
        return name().toLowerCase(Locale.ROOT);
    }
}
