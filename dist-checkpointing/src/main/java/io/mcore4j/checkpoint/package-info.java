/**
 * Sharded checkpoints: every rank writes its main-replica shards to one safetensors file, rank 0
 * validates that the shards tile each tensor exactly and writes {@code mcore4j_metadata.json} last, and a
 * load under any other parallel layout reads only the stored pieces that overlap what each rank
 * asks for. Entry points are {@link io.mcore4j.checkpoint.DistCheckpointing} (save, async save,
 * load) and {@link io.mcore4j.checkpoint.CheckpointManager} (iteration directories, the
 * {@code latest} marker and keep-last-N rotation).
 */
package io.mcore4j.checkpoint;
