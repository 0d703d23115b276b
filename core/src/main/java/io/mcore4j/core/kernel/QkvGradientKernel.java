package io.mcore4j.core.kernel;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;

/**
 * Packs attention's query, key and value gradients into the fused QKV projection's layout: per
 * query group its query heads, its key head and its value head, one pass that only moves bytes
 * (libtorch's concatenation of the transposed parts runs one element-by-element strided copy per
 * part). Found through {@link Kernels#find}; the caller composes the same result otherwise.
 */
public interface QkvGradientKernel {
    /**
     * @param dq query gradient {@code [s, b, heads, d]}, contiguous
     * @param dk key gradient {@code [s, b, groups, d]}, contiguous, same dtype
     * @param dv value gradient {@code [s, b, groups, d]}, contiguous, same dtype
     * @param owner manager that owns the result
     * @return {@code [s, b, groups * (heads / groups + 2) * d]}, contiguous, or null if the kernel
     *     cannot take these tensors (a row of {@code d} elements not a multiple of 16 bytes)
     */
    NDArray pack(NDArray dq, NDArray dk, NDArray dv, NDManager owner);
}
