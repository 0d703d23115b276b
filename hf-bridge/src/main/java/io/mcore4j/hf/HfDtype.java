package io.mcore4j.hf;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Locale;

/**
 * The floating-point dtypes of Hugging Face safetensors files that the bridge reads and writes,
 * under their safetensors names. Conversion to and from float32 happens here in Java, because DJL's
 * PyTorch engine cannot create bfloat16 tensors: bfloat16 is the upper half of a float32 (encoding
 * rounds to nearest even), float16 is IEEE half precision (encoding rounds to nearest even, with
 * subnormals, overflow to infinity).
 */
public enum HfDtype {
    /** bfloat16, 2 bytes; the default of exports. */
    BF16(2, "bfloat16"),
    /** IEEE float16, 2 bytes. */
    F16(2, "float16"),
    /** IEEE float32, 4 bytes. */
    F32(4, "float32");

    private final int bytes;
    private final String torchName;

    HfDtype(int bytes, String torchName) {
        this.bytes = bytes;
        this.torchName = torchName;
    }

    /** @return bytes per element */
    public int bytes() {
        return bytes;
    }

    /** @return the name {@code config.json} gives the dtype ({@code torch_dtype}), e.g. {@code "bfloat16"} */
    public String torchName() {
        return torchName;
    }

    /**
     * @param name a safetensors dtype name ({@code "BF16"}) or a torch name ({@code "bfloat16"}), any case
     * @return the dtype
     * @throws IllegalArgumentException naming the dtype and the supported ones
     */
    public static HfDtype parse(String name) {
        String n = name.toLowerCase(Locale.ROOT);
        for (HfDtype d : values()) {
            if (d.name().toLowerCase(Locale.ROOT).equals(n) || d.torchName.equals(n)) {
                return d;
            }
        }
        throw new IllegalArgumentException("dtype \"" + name + "\" is not supported: use bf16, f16 or f32");
    }

    /**
     * Decodes little-endian values.
     *
     * @param src bytes positioned at the first value; advanced past {@code count} values
     * @param dst receives the values as float32
     * @param at first index written in {@code dst}
     * @param count number of values
     */
    public void decode(ByteBuffer src, float[] dst, int at, int count) {
        ByteBuffer b = src.order(ByteOrder.LITTLE_ENDIAN);
        switch (this) {
            case F32 -> {
                for (int i = 0; i < count; i++) {
                    dst[at + i] = b.getFloat();
                }
            }
            case BF16 -> {
                for (int i = 0; i < count; i++) {
                    dst[at + i] = Float.intBitsToFloat((b.getShort() & 0xffff) << 16);
                }
            }
            case F16 -> {
                for (int i = 0; i < count; i++) {
                    dst[at + i] = halfToFloat(b.getShort());
                }
            }
            default -> throw new AssertionError(this);
        }
    }

    /**
     * Encodes values little-endian.
     *
     * @param src float32 values
     * @param from first index read
     * @param count number of values
     * @param dst receives {@code count * bytes()} bytes at its position
     */
    public void encode(float[] src, int from, int count, ByteBuffer dst) {
        ByteBuffer b = dst.order(ByteOrder.LITTLE_ENDIAN);
        for (int i = 0; i < count; i++) {
            float v = src[from + i];
            switch (this) {
                case F32 -> b.putFloat(v);
                case BF16 -> b.putShort(floatToBfloat16(v));
                case F16 -> b.putShort(floatToHalf(v));
                default -> throw new AssertionError(this);
            }
        }
    }

    /**
     * @param v a float32
     * @return its bfloat16 bits, rounded to nearest even; NaN stays a (quiet) NaN
     */
    static short floatToBfloat16(float v) {
        int bits = Float.floatToRawIntBits(v);
        if (Float.isNaN(v)) {
            return (short) ((bits >>> 16) | 0x0040);
        }
        int rounding = 0x7fff + ((bits >>> 16) & 1);
        return (short) ((bits + rounding) >>> 16);
    }

    /** IEEE half bits to float32 (exact). */
    static float halfToFloat(short h) {
        int bits = h & 0xffff;
        int sign = (bits & 0x8000) << 16;
        int exp = (bits >>> 10) & 0x1f;
        int mant = bits & 0x3ff;
        if (exp == 0x1f) {
            return Float.intBitsToFloat(sign | 0x7f800000 | (mant << 13));
        }
        if (exp == 0) {
            float magnitude = mant * 0x1p-24f; // subnormal (or zero): mant x 2^-24, exact in float32
            return sign == 0 ? magnitude : -magnitude;
        }
        return Float.intBitsToFloat(sign | ((exp + 112) << 23) | (mant << 13));
    }

    /** float32 to IEEE half bits, round to nearest even, overflow to infinity. */
    static short floatToHalf(float v) {
        int bits = Float.floatToRawIntBits(v);
        int sign = (bits >>> 16) & 0x8000;
        int exp = (bits >>> 23) & 0xff;
        int mant = bits & 0x7fffff;
        if (exp == 0xff) {
            return (short) (sign | 0x7c00 | (mant != 0 ? 0x200 : 0));
        }
        int e = exp - 127 + 15;
        if (e >= 0x1f) {
            return (short) (sign | 0x7c00);
        }
        if (e <= 0) {
            if (e < -10) {
                return (short) sign;
            }
            int m = mant | 0x800000; // implicit one
            int shift = 14 - e;
            int half = m >>> shift;
            int rest = m & ((1 << shift) - 1);
            int halfway = 1 << (shift - 1);
            if (rest > halfway || (rest == halfway && (half & 1) == 1)) {
                half++;
            }
            return (short) (sign | half);
        }
        int half = (e << 10) | (mant >>> 13);
        int rest = mant & 0x1fff;
        if (rest > 0x1000 || (rest == 0x1000 && (half & 1) == 1)) {
            half++; // may carry into the exponent, up to infinity: that is the correct rounding
        }
        return (short) (sign | half);
    }
}
