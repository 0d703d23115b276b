/**
 * Training data for mcore4j, byte-compatible with Megatron-Core's preprocessed {@code .bin}/{@code .idx}
 * datasets so that existing corpora can be used without re-tokenizing. Sub-packages hold the indexed
 * file format, GPT sample construction and blending, the data-parallel sampler, tokenizers and the
 * {@code preprocess} command.
 */
package io.mcore4j.data;
