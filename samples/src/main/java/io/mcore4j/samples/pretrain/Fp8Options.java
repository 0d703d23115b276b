package io.mcore4j.samples.pretrain;

import io.mcore4j.core.fp8.AmaxComputeAlgo;
import io.mcore4j.core.fp8.Fp8Config;
import io.mcore4j.core.fp8.Fp8Format;
import io.mcore4j.core.fp8.Fp8Recipe;
import picocli.CommandLine.Option;

/**
 * The FP8 flags of {@code pretrain-gpt} (and so of the benchmark), as a picocli mixin, named and defaulted as in
 * Megatron-LM: {@code --fp8-format} turns FP8 on for the transformer layers' QKV, projection, FC1 and FC2 GEMMs;
 * the others tune it and are refused without it. Validation raises {@link IllegalArgumentException} with one line
 * naming the flag.
 */
public final class Fp8Options {
    @Option(names = "--fp8-format", paramLabel = "FORMAT", description = "FP8 GEMMs in the transformer layers' linears:"
            + " e4m3 (every operand) or hybrid (e4m3 forward, e5m2 gradients); needs --bf16 or --fp16. Default: off.")
    String format;

    @Option(names = "--fp8-recipe", description = "delayed (scales from the amax history, Transformer Engine's delayed"
            + " scaling) or tensorwise (each cast's own amax). Default: delayed.")
    String recipe;

    @Option(names = "--fp8-margin", description = "Delayed scaling's scale is fp8_max / amax / 2^margin. Default: 0.")
    Integer margin;

    @Option(names = "--fp8-amax-history-len", description = "Steps of amax history per FP8 tensor. Default: 1.")
    Integer amaxHistoryLen;

    @Option(names = "--fp8-amax-compute-algo", description = "most_recent or max: the amax taken from the history."
            + " Default: most_recent.")
    String amaxComputeAlgo;

    @Option(names = "--first-last-layers-bf16", description = "Keep the first and last layers' linears out of FP8"
            + " (--num-layers-at-start-in-bf16, --num-layers-at-end-in-bf16).")
    boolean firstLastLayersBf16;

    @Option(names = "--num-layers-at-start-in-bf16", description = "With --first-last-layers-bf16: first layers kept"
            + " out of FP8. Default: 1.")
    Integer atStart;

    @Option(names = "--num-layers-at-end-in-bf16", description = "With --first-last-layers-bf16: last layers kept out"
            + " of FP8. Default: 1.")
    Integer atEnd;

    /** @return whether {@code --fp8-format} was given */
    public boolean enabled() {
        return format != null;
    }

    /**
     * @param fp16 --fp16
     * @param bf16 --bf16
     * @return the FP8 settings, or null without {@code --fp8-format}
     * @throws IllegalArgumentException for a bad value, FP8 without {@code --bf16} or {@code --fp16}, or a tuning
     *     flag without {@code --fp8-format}
     */
    public Fp8Config config(boolean fp16, boolean bf16) {
        if (format == null) {
            String stray = recipe != null ? "--fp8-recipe" : margin != null ? "--fp8-margin" : amaxHistoryLen != null
                    ? "--fp8-amax-history-len" : amaxComputeAlgo != null ? "--fp8-amax-compute-algo"
                    : firstLastLayersBf16 ? "--first-last-layers-bf16" : atStart != null ? "--num-layers-at-start-in-bf16"
                    : atEnd != null ? "--num-layers-at-end-in-bf16" : null;
            if (stray != null) {
                throw new IllegalArgumentException(stray + " needs --fp8-format e4m3 or hybrid");
            }
            return null;
        }
        if (!fp16 && !bf16) {
            throw new IllegalArgumentException("--fp8-format " + format + " needs --bf16 or --fp16 (Megatron's rule: the"
                    + " parameters stay in 16 bits, only the GEMMs' operands are float8)");
        }
        if (!firstLastLayersBf16 && (atStart != null || atEnd != null)) {
            throw new IllegalArgumentException((atStart != null ? "--num-layers-at-start-in-bf16" : "--num-layers-at-end-in-bf16")
                    + " needs --first-last-layers-bf16");
        }
        Fp8Config c = Fp8Config.of(Fp8Format.of(format));
        if (recipe != null) {
            c = c.withRecipe(Fp8Recipe.of(recipe));
        }
        if (margin != null) {
            c = c.withMargin(margin);
        }
        if (amaxHistoryLen != null || amaxComputeAlgo != null) {
            c = c.withAmaxHistory(amaxHistoryLen != null ? amaxHistoryLen : c.amaxHistoryLen(),
                    amaxComputeAlgo != null ? AmaxComputeAlgo.of(amaxComputeAlgo) : c.amaxComputeAlgo());
        }
        if (firstLastLayersBf16) {
            c = c.withBf16Layers(atStart != null ? atStart : 1, atEnd != null ? atEnd : 1);
        }
        return c;
    }
}
