package io.mcore4j.core;

import ai.djl.ndarray.types.DataType;

/**
 * The numeric precision of training, as Megatron's {@code --fp16} and {@code --bf16} choose it: the
 * dtype of parameters and activations, and whether the loss is scaled. Both half precisions keep
 * float32 master weights and optimizer state; only float16, whose exponent range is narrow, needs
 * (dynamic) loss scaling.
 */
public enum Precision {
    /** float32 throughout. */
    FP32(DataType.FLOAT32, false),
    /** float16 parameters and activations, float32 master weights, dynamic loss scaling ({@code --fp16}). */
    FP16(DataType.FLOAT16, true),
    /** bfloat16 parameters and activations, float32 master weights, no loss scaling ({@code --bf16}). */
    BF16(DataType.BFLOAT16, false);

    private final DataType paramDtype;
    private final boolean lossScaling;

    Precision(DataType paramDtype, boolean lossScaling) {
        this.paramDtype = paramDtype;
        this.lossScaling = lossScaling;
    }

    /** @return the dtype of parameters and activations (Megatron's {@code params_dtype}) */
    public DataType paramDtype() {
        return paramDtype;
    }

    /** @return whether the loss is scaled (dynamically) before backward */
    public boolean lossScaling() {
        return lossScaling;
    }

    /**
     * The precision Megatron's two flags select.
     *
     * @param fp16 {@code --fp16}
     * @param bf16 {@code --bf16}
     * @return FP16, BF16, or FP32 when neither is set
     * @throws IllegalArgumentException if both are set
     */
    public static Precision of(boolean fp16, boolean bf16) {
        if (fp16 && bf16) {
            throw new IllegalArgumentException("--fp16 and --bf16 are mutually exclusive: choose one half precision");
        }
        return fp16 ? FP16 : bf16 ? BF16 : FP32;
    }

    /**
     * @param paramDtype a parameter dtype
     * @return the precision whose parameters have that dtype
     * @throws IllegalArgumentException for any other dtype
     */
    public static Precision ofParamDtype(DataType paramDtype) {
        for (Precision p : values()) {
            if (p.paramDtype == paramDtype) {
                return p;
            }
        }
        throw new IllegalArgumentException("parameter dtype " + paramDtype + " has no training precision;"
                + " use float32, float16 or bfloat16");
    }
}
