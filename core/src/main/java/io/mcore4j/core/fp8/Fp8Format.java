package io.mcore4j.core.fp8;

import java.util.Locale;

/**
 * Which float8 formats the GEMMs' operands use, Megatron's {@code --fp8-format}.
 */
public enum Fp8Format {
    /** Every operand in e4m3 (largest finite value 448), gradients too. */
    E4M3,
    /** Forward operands (inputs, weights) in e4m3, output gradients in e5m2 (largest finite value 57344). */
    HYBRID;

    /** The largest finite e4m3 value. */
    public static final double E4M3_MAX = 448.0;
    /** The largest finite e5m2 value. */
    public static final double E5M2_MAX = 57344.0;

    /** @return whether output gradients are cast to e5m2 */
    public boolean gradientsInE5m2() {
        return this == HYBRID;
    }

    /** @return Megatron's name, {@code e4m3} or {@code hybrid} */
    public String megatronName() {
        return name().toLowerCase(Locale.ROOT);
    }

    /**
     * @param name Megatron's name, {@code e4m3} or {@code hybrid}
     * @return the format
     * @throws IllegalArgumentException for any other name
     */
    public static Fp8Format of(String name) {
        for (Fp8Format f : values()) {
            if (f.megatronName().equals(name)) {
                return f;
            }
        }
        throw new IllegalArgumentException("--fp8-format " + name + " is not supported: use e4m3 or hybrid");
    }
}
