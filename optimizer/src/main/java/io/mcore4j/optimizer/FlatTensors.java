package io.mcore4j.optimizer;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.index.NDIndex;
import io.mcore4j.core.autograd.NoGrad;
import io.mcore4j.core.Tensors;

/**
 * Views into flat (1-D) buffers, in-place writes through them, and ownership of new results, as the
 * buckets and the optimizer use them. The writes need grad mode off (callers hold a {@link NoGrad})
 * and a target that does not require grad.
 */
final class FlatTensors {
    private FlatTensors() {}

    /**
     * Elements {@code [start, end)} of a 1-D tensor, as a view sharing its storage.
     *
     * @param flat a 1-D tensor
     * @param start first element
     * @param end one past the last element
     * @param owner manager that owns the returned handle
     * @return the view
     */
    static NDArray range(NDArray flat, long start, long end, NDManager owner) {
        NDArray view = Tensors.narrow(flat, 0, start, end);
        view.attach(owner);
        return view;
    }

    /**
     * Sets every element of {@code target} to zero in place, from a device scalar (a Java number
     * would be a synchronising host copy on a GPU).
     *
     * @param target the tensor written, e.g. a {@link #range} view of an uninitialised buffer
     * @param owner the manager that owns the scalar
     */
    static void fillZero(NDArray target, NDManager owner) {
        target.set(new NDIndex("..."), Tensors.scalar(0, target, owner));
    }
}
