/**
 * The description of one rank's piece of a global tensor (key, global shape, offsets, replica), so
 * that layers and optimizers can describe their state for checkpoints without depending on
 * checkpoint I/O, which lives in {@code dist-checkpointing}.
 */
package io.mcore4j.core.shard;
