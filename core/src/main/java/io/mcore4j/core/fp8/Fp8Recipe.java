package io.mcore4j.core.fp8;

import java.util.Locale;

/**
 * How each FP8 tensor's scale is chosen, Megatron's {@code --fp8-recipe}. Both are per-tensor: one float32
 * scale for the whole tensor.
 */
public enum Fp8Recipe {
    /**
     * Transformer Engine's delayed scaling: a cast uses the scale computed from the amax history of earlier
     * steps ({@link Fp8Scaling}) and records this tensor's amax for later ones; no pass over the tensor before
     * its cast.
     */
    DELAYED,
    /** Current scaling: the scale comes from this tensor's own amax, {@code fp8_max / amax}, before its cast. */
    TENSORWISE;

    /** @return Megatron's name, {@code delayed} or {@code tensorwise} */
    public String megatronName() {
        return name().toLowerCase(Locale.ROOT);
    }

    /**
     * @param name Megatron's name
     * @return the recipe
     * @throws IllegalArgumentException for Megatron's {@code mxfp8}, {@code blockwise} (block scaling, not
     *     implemented) and any other name
     */
    public static Fp8Recipe of(String name) {
        for (Fp8Recipe r : values()) {
            if (r.megatronName().equals(name)) {
                return r;
            }
        }
        if ("mxfp8".equals(name) || "blockwise".equals(name)) {
            throw new IllegalArgumentException("--fp8-recipe " + name + ": block-scaled FP8 is not implemented;"
                    + " use delayed or tensorwise (per-tensor scales)");
        }
        throw new IllegalArgumentException("--fp8-recipe " + name + " is not supported: use delayed or tensorwise");
    }
}
