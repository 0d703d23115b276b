/**
 * Megatron's indexed dataset format: a {@code .idx} file describing sequences and documents and a
 * {@code .bin} file holding their tokens back to back. Readers memory-map both files in segments (so files
 * over 2 GiB work) and validate every offset before use; writers stream documents and merge datasets.
 */
package io.mcore4j.data.indexed;
