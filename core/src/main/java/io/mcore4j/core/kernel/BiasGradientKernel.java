package io.mcore4j.core.kernel;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;

/**
 * Bias gradients of a transformer MLP in one pass each: the exact (erf) GELU's backward together
 * with the column sums of its result (the gradient of the bias before the GELU), and the column sums
 * of an output gradient (the bias of the layer after it). libtorch takes a GELU-backward pass and a
 * separate reduction per bias. Found through {@link Kernels#find}; the caller composes the same
 * values otherwise (the sums to float32 rounding: another order of additions).
 */
public interface BiasGradientKernel {
    /**
     * @param h the GELU's input {@code [rows, cols]} (any leading dims), contiguous
     * @param dy the gradient of the GELU's output, same shape and dtype, contiguous
     * @param owner manager that owns the results
     * @return {@code {dh, sums}}: {@code dh = dy · gelu'(h)} in {@code h}'s dtype and shape, and the
     *     float32 column sums of {@code dh} as rounded, {@code [cols]}; null if the kernel cannot take
     *     these tensors (dtype, or a row not a multiple of 16 bytes)
     */
    NDArray[] geluBackward(NDArray h, NDArray dy, NDManager owner);

    /**
     * @param x {@code [rows, cols]} (any leading dims), contiguous
     * @param owner manager that owns the result
     * @return the float32 column sums {@code [cols]}, or null if the kernel cannot take {@code x}
     */
    NDArray columnSum(NDArray x, NDManager owner);
}
