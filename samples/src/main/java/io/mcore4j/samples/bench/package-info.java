/**
 * {@code gpt-benchmark}: trains a GPT on synthetic tokens for a few steps and prints one line with
 * tokens/s per GPU, TFLOP/s per GPU, MFU (Megatron's FLOPs formula), step time and memory.
 * {@code CollectiveBenchmark}: the time and bandwidth of one all-reduce, reduce-scatter and all-gather
 * per message size through mcore4j's communicators, in nccl-tests' terms.
 */
package io.mcore4j.samples.bench;
