package io.mcore4j.training.pretrained;

import ai.djl.ndarray.types.DataType;
import io.mcore4j.models.transformer.LoraConfig;

import java.util.Objects;

/**
 * How {@link PretrainedGpt} builds this rank's model before filling it from a checkpoint. Start from
 * {@link #DEFAULTS} and change what differs.
 *
 * @param dtype the parameters' dtype: {@code FLOAT32}, {@code FLOAT16} or {@code BFLOAT16}; fine-tuning
 *              follows it (fp16 with dynamic loss scaling, bf16 with fp32 master weights)
 * @param vocabDivisor a Hugging Face model's vocabulary is padded to a multiple of this times the
 *                     tensor-parallel size (Megatron's {@code --make-vocab-size-divisible-by}); an mcore4j
 *                     checkpoint keeps the padded size it was saved with. The padded columns' logits (0)
 *                     take part in the training loss, as in Megatron, so the default, 1, pads only where
 *                     TP does not divide the vocabulary and keeps the loss transformers computes;
 *                     Megatron's 128 aligns the output layer's matrix for speed
 * @param lora LoRA adapters on every layer's linears, the base weights frozen while fine-tuning; null to
 *             fine-tune every weight
 * @param seed the seed of what no checkpoint holds: the adapters' initial weights and the dropout masks
 */
public record LoadOptions(DataType dtype, int vocabDivisor, LoraConfig lora, long seed) {
    /** float32, vocabulary divisor 1, no adapters, seed 1234. */
    public static final LoadOptions DEFAULTS = new LoadOptions(DataType.FLOAT32, 1, null, 1234);

    /** Validates the values, naming the bad one. */
    public LoadOptions {
        Objects.requireNonNull(dtype, "dtype");
        if (dtype != DataType.FLOAT32 && dtype != DataType.FLOAT16 && dtype != DataType.BFLOAT16) {
            throw new IllegalArgumentException("parameter dtype " + dtype.name() + " is not one mcore4j trains in; expected"
                    + " FLOAT32, FLOAT16 or BFLOAT16");
        }
        if (vocabDivisor < 1) {
            throw new IllegalArgumentException("vocabulary divisor " + vocabDivisor + " must be at least 1");
        }
    }

    /**
     * @param value the parameters' dtype
     * @return these options with it
     */
    public LoadOptions withDtype(DataType value) {
        return new LoadOptions(value, vocabDivisor, lora, seed);
    }

    /**
     * @param value LoRA's settings, or null for full fine-tuning
     * @return these options with them
     */
    public LoadOptions withLora(LoraConfig value) {
        return new LoadOptions(dtype, vocabDivisor, value, seed);
    }

    /**
     * @param value the vocabulary divisor
     * @return these options with it
     */
    public LoadOptions withVocabDivisor(int value) {
        return new LoadOptions(dtype, value, lora, seed);
    }

    /**
     * @param value the seed of the adapters and dropout
     * @return these options with it
     */
    public LoadOptions withSeed(long value) {
        return new LoadOptions(dtype, vocabDivisor, lora, value);
    }
}
