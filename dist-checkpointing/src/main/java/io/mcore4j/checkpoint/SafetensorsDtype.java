package io.mcore4j.checkpoint;

import ai.djl.ndarray.types.DataType;

/**
 * The dtypes a checkpoint stores, under their safetensors names. bfloat16 is {@code BF16}, two bytes
 * per element, bit for bit (its tensors are read and written through {@link io.mcore4j.core.DataTypes}).
 * Public because {@link SafetensorsHeader} is: the Hugging Face bridge reads its files' headers through it.
 */
public enum SafetensorsDtype {
    /** float16. */
    F16(DataType.FLOAT16, 2),
    /** bfloat16. */
    BF16(DataType.BFLOAT16, 2),
    /** float32. */
    F32(DataType.FLOAT32, 4),
    /** float64. */
    F64(DataType.FLOAT64, 8),
    /** int8. */
    I8(DataType.INT8, 1),
    /** uint8. */
    U8(DataType.UINT8, 1),
    /** int32. */
    I32(DataType.INT32, 4),
    /** int64. */
    I64(DataType.INT64, 8),
    /** boolean, one byte. */
    BOOL(DataType.BOOLEAN, 1);

    private final DataType dataType;
    private final int bytes;

    SafetensorsDtype(DataType dataType, int bytes) {
        this.dataType = dataType;
        this.bytes = bytes;
    }

    /** @return the DJL dtype */
    public DataType dataType() {
        return dataType;
    }

    /** @return bytes per element */
    public int bytes() {
        return bytes;
    }

    /**
     * @param type a DJL dtype
     * @return its safetensors name
     * @throws IllegalArgumentException for a dtype a checkpoint cannot hold
     */
    static SafetensorsDtype of(DataType type) {
        for (SafetensorsDtype d : values()) {
            if (d.dataType == type) {
                return d;
            }
        }
        throw new IllegalArgumentException("dtype " + type + " cannot be stored; supported: float16, bfloat16, float32, "
                + "float64, int8, uint8, int32, int64, boolean");
    }

    /**
     * @param name a safetensors dtype name such as {@code "F32"}
     * @return the dtype, or null if unknown
     */
    static SafetensorsDtype parseOrNull(String name) {
        for (SafetensorsDtype d : values()) {
            if (d.name().equals(name)) {
                return d;
            }
        }
        return null;
    }
}
