/**
 * {@code gpt-benchmark}: trains a GPT on synthetic tokens for a few steps and prints one line with
 * tokens/s per GPU, TFLOP/s per GPU, MFU (Megatron's FLOPs formula), step time and memory.
 */
package io.mcore4j.samples.bench;
