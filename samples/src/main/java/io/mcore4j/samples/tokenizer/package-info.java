/**
 * Megatron-LM's tokenizer flags ({@code --tokenizer-type}, {@code --vocab-file}, {@code --merge-file},
 * {@code --tokenizer-model}, plus mcore4j's {@code --eod-token}) as one picocli mixin, shared by
 * {@code preprocess} and {@code pretrain-gpt}.
 */
package io.mcore4j.samples.tokenizer;
