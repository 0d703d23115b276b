package io.mcore4j.core.kernel;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;

/**
 * A LayerNorm over the last dim in one read of each row: the forward with the statistics its backward
 * needs, and the input gradient added to the gradient a residual branch carries (the gradient of a
 * pre-norm block's input {@code h} in {@code h + f(LN(h))}; libtorch writes the LayerNorm's input
 * gradient and then adds the residual's in a second pass). Found through {@link Kernels#find}; the
 * caller composes the same values otherwise (libtorch's {@code native_layer_norm} and its backward, to
 * float32 rounding: another order of additions, one rounding to the dtype instead of two).
 */
public interface LayerNormKernel {
    /**
     * @param x the input {@code [..., cols]}, contiguous
     * @param weight the affine weight {@code [cols]}, {@code x}'s dtype, contiguous
     * @param bias the affine bias {@code [cols]}, {@code x}'s dtype, contiguous
     * @param epsilon added to the variance
     * @param owner manager that owns the results
     * @return {@code {out, mean, rstd}}: the normalised, scaled and shifted {@code x} in its shape and dtype, and
     *     float32 per-row means and reciprocal standard deviations of shape {@code [..., 1]} (as libtorch's
     *     {@code native_layer_norm} returns them); null if the kernel cannot take these tensors (dtype, a row not
     *     a multiple of 16 bytes, or rows longer than the kernel holds)
     */
    NDArray[] forward(NDArray x, NDArray weight, NDArray bias, double epsilon, NDManager owner);

    /**
     * @param normedGradient the gradient of the LayerNorm's output before its affine weight is applied
     *     (of {@code weight · x̂ + bias}, so: the output gradient), {@code x}'s shape and dtype, contiguous
     * @param x the LayerNorm's input {@code [..., cols]}, contiguous
     * @param mean float32 per-row means as libtorch's {@code native_layer_norm} returns them ({@code [..., 1]}), contiguous
     * @param rstd float32 per-row reciprocal standard deviations, same shape, contiguous
     * @param weight the affine weight {@code [cols]}, {@code x}'s dtype, contiguous
     * @param residualGradient the gradient the residual branch carries, {@code x}'s shape and dtype, contiguous
     * @param owner manager that owns the result
     * @return {@code residualGradient + dLN/dx}, {@code x}'s shape and dtype; null if the kernel cannot take these
     *     tensors (dtype, or a row not a multiple of 16 bytes)
     */
    NDArray inputGradientPlus(NDArray normedGradient, NDArray x, NDArray mean, NDArray rstd, NDArray weight,
                              NDArray residualGradient, NDManager owner);
}
