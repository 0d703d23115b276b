/**
 * Programs a downstream team writes against mcore4j's public API, shown whole in the README and run by
 * the tests as they are: {@link io.mcore4j.samples.examples.HfFineTuneExample} loads a Hugging Face
 * model at TP2, computes logits and fine-tunes it.
 */
package io.mcore4j.samples.examples;
