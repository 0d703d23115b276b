/**
 * {@code convert-hf} and {@code export-hf}: thin command lines over the Hugging Face bridge. The
 * first imports a Hugging Face checkpoint at a parallel layout and saves it as an mcore4j
 * distributed checkpoint; the second loads the model weights of an mcore4j checkpoint (any layout,
 * e.g. one pretrain-gpt saved) and writes them as a Hugging Face directory.
 */
package io.mcore4j.samples.hf;
