/**
 * The {@code preprocess} command: the command line (picocli) of the {@code data} module's JSON Lines to
 * Megatron indexed dataset conversion, with Megatron-LM's {@code tools/preprocess_data.py} flag names.
 */
package io.mcore4j.samples.preprocess;
