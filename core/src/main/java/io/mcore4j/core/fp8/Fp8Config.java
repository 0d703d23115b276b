package io.mcore4j.core.fp8;

import java.util.Objects;

/**
 * FP8 training of a model's transformer-layer linears (QKV, projection, FC1, FC2), with Megatron's flags and
 * defaults. The parameters stay in bf16 or fp16 (Megatron requires one of them with FP8), the master weights and
 * the optimizer are unchanged; only the GEMMs' operands are cast to float8, each tensor with one float32 scale.
 *
 * @param format the formats of the operands ({@code --fp8-format})
 * @param recipe how scales are chosen ({@code --fp8-recipe}, default delayed)
 * @param margin delayed scaling's scale is {@code fp8_max / amax / 2^margin} ({@code --fp8-margin}, default 0, at least 0)
 * @param amaxHistoryLen steps of amax history per tensor ({@code --fp8-amax-history-len}, default 1, at least 1)
 * @param amaxComputeAlgo the amax taken from the history ({@code --fp8-amax-compute-algo}, default most_recent)
 * @param firstLastLayersBf16 keep the first and last layers' linears out of FP8 ({@code --first-last-layers-bf16})
 * @param numLayersAtStartInBf16 with {@code firstLastLayersBf16}, how many first layers ({@code --num-layers-at-start-in-bf16}, default 1)
 * @param numLayersAtEndInBf16 with {@code firstLastLayersBf16}, how many last layers ({@code --num-layers-at-end-in-bf16}, default 1)
 */
public record Fp8Config(Fp8Format format, Fp8Recipe recipe, int margin, int amaxHistoryLen,
                        AmaxComputeAlgo amaxComputeAlgo, boolean firstLastLayersBf16, int numLayersAtStartInBf16,
                        int numLayersAtEndInBf16) {

    /**
     * Validates the values.
     *
     * @throws IllegalArgumentException naming the flag and its value when a count is out of range
     * @throws NullPointerException if a choice is null
     */
    public Fp8Config {
        Objects.requireNonNull(format, "format");
        Objects.requireNonNull(recipe, "recipe");
        Objects.requireNonNull(amaxComputeAlgo, "amaxComputeAlgo");
        if (margin < 0) {
            throw new IllegalArgumentException("--fp8-margin " + margin + " must be at least 0");
        }
        if (amaxHistoryLen < 1) {
            throw new IllegalArgumentException("--fp8-amax-history-len " + amaxHistoryLen + " must be at least 1");
        }
        if (numLayersAtStartInBf16 < 0 || numLayersAtEndInBf16 < 0) {
            throw new IllegalArgumentException("--num-layers-at-start-in-bf16 " + numLayersAtStartInBf16
                    + " and --num-layers-at-end-in-bf16 " + numLayersAtEndInBf16 + " must be at least 0");
        }
    }

    /**
     * Megatron's defaults for a format: delayed scaling, margin 0, history 1, most_recent, every layer in FP8.
     *
     * @param format the formats
     * @return the configuration
     */
    public static Fp8Config of(Fp8Format format) {
        return new Fp8Config(format, Fp8Recipe.DELAYED, 0, 1, AmaxComputeAlgo.MOST_RECENT, false, 1, 1);
    }

    /** @param value the recipe @return a copy with it */
    public Fp8Config withRecipe(Fp8Recipe value) {
        return new Fp8Config(format, value, margin, amaxHistoryLen, amaxComputeAlgo, firstLastLayersBf16,
                numLayersAtStartInBf16, numLayersAtEndInBf16);
    }

    /** @param length the history length @param algo the algorithm @return a copy with them */
    public Fp8Config withAmaxHistory(int length, AmaxComputeAlgo algo) {
        return new Fp8Config(format, recipe, margin, length, algo, firstLastLayersBf16, numLayersAtStartInBf16,
                numLayersAtEndInBf16);
    }

    /** @param value the margin @return a copy with it */
    public Fp8Config withMargin(int value) {
        return new Fp8Config(format, recipe, value, amaxHistoryLen, amaxComputeAlgo, firstLastLayersBf16,
                numLayersAtStartInBf16, numLayersAtEndInBf16);
    }

    /** @param atStart first layers kept in bf16 @param atEnd last layers kept in bf16 @return a copy with {@code firstLastLayersBf16} */
    public Fp8Config withBf16Layers(int atStart, int atEnd) {
        return new Fp8Config(format, recipe, margin, amaxHistoryLen, amaxComputeAlgo, true, atStart, atEnd);
    }

    /**
     * Whether a layer's linears run in FP8 (Megatron's {@code --first-last-layers-bf16} rule).
     *
     * @param layer the layer's index in the whole model, from 0
     * @param numLayers the model's layers
     * @return false for the first {@code numLayersAtStartInBf16} and last {@code numLayersAtEndInBf16} layers
     *     under {@code firstLastLayersBf16}, true otherwise
     */
    public boolean fp8Layer(int layer, int numLayers) {
        if (!firstLastLayersBf16) {
            return true;
        }
        return layer >= numLayersAtStartInBf16 && layer < numLayers - numLayersAtEndInBf16;
    }

    /**
     * Checks the layer counts against a model.
     *
     * @param numLayers the model's layers
     * @throws IllegalArgumentException if the layers kept in bf16 leave none in FP8
     */
    public void checkLayers(int numLayers) {
        if (firstLastLayersBf16 && numLayersAtStartInBf16 + numLayersAtEndInBf16 >= numLayers) {
            throw new IllegalArgumentException("--num-layers-at-start-in-bf16 " + numLayersAtStartInBf16
                    + " + --num-layers-at-end-in-bf16 " + numLayersAtEndInBf16 + " leave none of the " + numLayers
                    + " layers in FP8");
        }
    }
}
