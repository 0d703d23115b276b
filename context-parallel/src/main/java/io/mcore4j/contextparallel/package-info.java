/**
 * Context parallelism over one context-parallel {@link io.mcore4j.parallel.Communicator}: the
 * load-balanced causal split of each sequence across ranks ({@link
 * io.mcore4j.contextparallel.ContextParallelSplit}, applied to tokens, labels, loss masks and
 * position ids) and the key/value exchanges attention needs across the group ({@link
 * io.mcore4j.contextparallel.ContextParallelMappings}, autograd Functions whose backward is the
 * transposed exchange), chosen by {@link io.mcore4j.contextparallel.CpCommType}; and ring
 * attention on libtorch's fused kernels ({@link io.mcore4j.contextparallel.FusedRingAttention}).
 */
package io.mcore4j.contextparallel;
