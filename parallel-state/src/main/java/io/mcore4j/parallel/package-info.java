/**
 * Parallel layout and communication: {@link io.mcore4j.parallel.ParallelDims} describes a layout,
 * {@link io.mcore4j.parallel.RankGrid} derives the process groups from it, and a
 * {@link io.mcore4j.parallel.Communicator} per group runs the collectives over a
 * {@link io.mcore4j.parallel.Backend} (in-JVM threads, TCP processes, NCCL), all checking their
 * arguments alike ({@link io.mcore4j.parallel.CollectiveArguments}). Groups are values passed to
 * whoever communicates; nothing here is static or global.
 */
package io.mcore4j.parallel;
