/**
 * Pretrained GPTs as a downstream program uses them, in a few lines: {@link
 * io.mcore4j.training.pretrained.PretrainedGpt} loads a Hugging Face directory or an mcore4j
 * checkpoint as this rank's model chunks at the layout of its groups, computes logits for a batch of
 * token ids (gathered over tensor parallelism, vocabulary padding cut) and fine-tunes the model through
 * the same {@link io.mcore4j.training.TrainStep} and {@link io.mcore4j.training.TrainingLoop} as
 * {@code pretrain-gpt}, fully or with LoRA adapters.
 */
package io.mcore4j.training.pretrained;
