package io.mcore4j.optimizer;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.index.NDIndex;
import ai.djl.ndarray.types.Shape;
import ai.djl.ndarray.types.SparseFormat;
import ai.djl.pytorch.engine.PtNDArray;
import ai.djl.pytorch.engine.PtNDManager;
import ai.djl.pytorch.jni.JniUtils;

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
        NDArray view = JniUtils.slice((PtNDArray) flat, 0, start, end, 1);
        view.attach(owner);
        return view;
    }

    /**
     * Attaches {@code array} to {@code owner} and returns it: DJL attaches a result to its first
     * operand's manager, which for state arrays is a long-lived one.
     *
     * @param array a new result
     * @param owner the manager that should own it
     * @return {@code array}
     */
    static NDArray own(NDArray array, NDManager owner) {
        array.attach(owner);
        return array;
    }

    /**
     * Copies {@code source} into {@code target} in place, converting to {@code target}'s dtype in
     * the same copy (libtorch's {@code copy_}): a float16 gradient reaches a float32 buffer, or a
     * float32 master a float16 parameter, in one pass and with no converted temporary.
     *
     * @param target the tensor written, e.g. a {@link #range} view of a flat buffer
     * @param source the values, of {@code target}'s shape and any floating dtype
     * @throws IllegalArgumentException if the shapes differ
     */
    static void copyCast(NDArray target, NDArray source) {
        if (!target.getShape().equals(source.getShape())) {
            throw new IllegalArgumentException("cannot copy a tensor of shape " + source.getShape()
                    + " into one of shape " + target.getShape());
        }
        target.set(new NDIndex("..."), source);
    }

    /**
     * Sets every element of {@code target} to zero in place.
     *
     * @param target the tensor written, e.g. a {@link #range} view of an uninitialised buffer
     */
    static void fillZero(NDArray target) {
        target.set(new NDIndex("..."), 0);
    }
}
