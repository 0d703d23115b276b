/**
 * {@code generate-gpt}: prints completions of prompts from a pretrain-gpt checkpoint through
 * mcore4j-inference, at any tensor- and pipeline-parallel size, with the byte-level tokenizer or a
 * Hugging Face {@code tokenizer.json}.
 */
package io.mcore4j.samples.generate;
