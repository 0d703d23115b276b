package io.mcore4j.core.kernel;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;

/**
 * Cross-entropy over a whole vocabulary held on one device, one pass over the logits each way:
 * forward reads the logits once for each token's log-sum-exp and loss, backward once more to write
 * {@code (softmax − onehot(target))·g}; nothing of the vocabulary's size is kept between them but the
 * logits themselves (libtorch's log-softmax writes and keeps float32 log-probabilities, twice the
 * size of float16 logits). Found through {@link Kernels#find}; the caller composes the same values
 * otherwise (to float32 rounding: another order of additions).
 */
public interface CrossEntropyKernel {
    /**
     * @param logits {@code [..., V]}, contiguous
     * @param target int64 ids of the logits' shape without the last dim, contiguous, in {@code [0, V)}
     * @param owner manager that owns the results
     * @return {@code {loss, logSumExp}}, float32 of {@code target}'s shape (a target outside
     *     {@code [0, V)} gives a NaN loss); null if the kernel cannot take these tensors (dtype, or
     *     a row not a multiple of 16 bytes)
     */
    NDArray[] forward(NDArray logits, NDArray target, NDManager owner);

    /**
     * @param logits the logits {@link #forward} took
     * @param target the ids it took
     * @param logSumExp its second result
     * @param grad the float32 upstream gradient of each token's loss, {@code target}'s shape, contiguous
     * @param owner manager that owns the result
     * @return the gradient of the logits in their dtype and shape
     */
    NDArray backward(NDArray logits, NDArray target, NDArray logSumExp, NDArray grad, NDManager owner);
}
