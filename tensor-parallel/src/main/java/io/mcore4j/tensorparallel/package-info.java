/**
 * Tensor and sequence parallelism over one tensor-parallel {@link io.mcore4j.parallel.Communicator}:
 * the region mappings ({@link io.mcore4j.tensorparallel.Mappings}, each an autograd Function whose
 * backward is the transposed collective), the parallel layers (column- and row-parallel linear,
 * vocabulary-parallel embedding) and the vocabulary-parallel cross-entropy. Layers do their local
 * math with plain DJL ops inside the caller's {@link io.mcore4j.core.autograd.AutogradScope};
 * communication happens only inside the mappings.
 */
package io.mcore4j.tensorparallel;
