package io.mcore4j.training.gpt;

/**
 * What the end-of-document tokens inside pretraining windows do, with Megatron's flags and meanings
 * ({@code get_ltor_masks_and_position_ids}): {@code --reset-position-ids} restarts the positions after
 * each EOD, {@code --reset-attention-mask} stops attention across EODs (the documents of a window become
 * {@link io.mcore4j.core.PackedSequences}, each EOD in the document it ends), {@code --eod-mask-loss}
 * gives the loss of every position whose input token is an EOD weight 0. {@link GptBatches} applies it
 * to each micro-batch.
 *
 * @param eod the end-of-document id, or -1 where there is none (then no flag may be on)
 * @param resetPositionIds Megatron's {@code --reset-position-ids}
 * @param resetAttentionMask Megatron's {@code --reset-attention-mask}
 * @param eodMaskLoss Megatron's {@code --eod-mask-loss}
 */
public record DocumentMasking(int eod, boolean resetPositionIds, boolean resetAttentionMask, boolean eodMaskLoss) {
    /** End-of-document tokens are ordinary tokens (Megatron's defaults). */
    public static final DocumentMasking NONE = new DocumentMasking(-1, false, false, false);

    /**
     * Refuses a flag without an end-of-document id.
     *
     * @throws IllegalArgumentException naming the first flag that is on while {@code eod} is negative
     */
    public DocumentMasking {
        if (eod < 0 && (resetPositionIds || resetAttentionMask || eodMaskLoss)) {
            String flag = resetPositionIds ? "--reset-position-ids" : resetAttentionMask ? "--reset-attention-mask" : "--eod-mask-loss";
            throw new IllegalArgumentException(flag + " needs the tokenizer's end-of-document id (give --tokenizer-type,"
                    + " or --eod-token for a HuggingFace tokenizer without one)");
        }
    }

    /** @return whether any flag is on */
    public boolean any() {
        return resetPositionIds || resetAttentionMask || eodMaskLoss;
    }
}
