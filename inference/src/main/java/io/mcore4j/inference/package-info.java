/**
 * Text generation from a GPT of mcore4j-models through the same layers it was trained with: per-layer
 * key/value caches ({@link io.mcore4j.inference.KvCache}), a prefill and one-token decode steps at any
 * tensor- and pipeline-parallel size, greedy and seeded temperature/top-k/top-p sampling, batches of
 * prompts of different lengths, and stopping at an end-of-sequence token or a token budget
 * ({@link io.mcore4j.inference.Generator}). A dense layer's pass is one native call of a TorchScript kernel
 * over the layer's own parameters and its cache: decoding is bound by the host's cost per call.
 */
package io.mcore4j.inference;
