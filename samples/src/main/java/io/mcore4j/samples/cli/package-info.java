/**
 * {@code mcore4j}: the distribution's one command line ({@code bin/mcore4j COMMAND [FLAGS]}), which
 * dispatches to the sample programs (pretrain-gpt, generate-gpt, preprocess, convert-hf, export-hf,
 * plan, the benchmark, the local launcher and the README's main job) in one JVM, with their exit
 * codes and one-line errors unchanged.
 */
package io.mcore4j.samples.cli;
