/**
 * The library behind the {@code preprocess} command: tokenizes a JSON Lines corpus in parallel into Megatron indexed datasets
 * ({@code <prefix>_<key>_document.bin/.idx}), with a strict JSON reader for the input lines and an
 * optional HuggingFace tokenizer through DJL's {@code tokenizers} artifact.
 */
package io.mcore4j.data.preprocess;
