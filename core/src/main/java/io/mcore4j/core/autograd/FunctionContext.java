package io.mcore4j.core.autograd;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;

import java.util.Arrays;
import java.util.List;

/**
 * Per-application state of a {@link Function}: the tensors it saved for backward, which inputs
 * need gradients, the manager that owns its temporaries (the scope's manager), and whether the
 * applying scope is training. Not thread-safe; used by the thread that owns the scope.
 */
public final class FunctionContext {
    private final NDManager manager;
    private final boolean[] needsInputGrad;
    private final boolean training;
    private List<NDArray> saved = List.of();
    private Object state;
    private boolean[] deferred;

    FunctionContext(NDManager manager, boolean[] needsInputGrad, boolean training) {
        this.manager = manager;
        this.needsInputGrad = needsInputGrad;
        this.training = training;
    }

    /**
     * The manager owning every tensor of this application (the enclosing scope's manager).
     *
     * @return never null
     */
    public NDManager manager() {
        return manager;
    }

    /**
     * Whether the scope that applied the function is training ({@link AutogradScope#isTraining()});
     * the same in forward and backward. A function that runs code in a scope of its own passes it on.
     *
     * @return the applying scope's training flag
     */
    public boolean isTraining() {
        return training;
    }

    /**
     * Whether input {@code index} takes part in autograd, i.e. whether backward must return its
     * gradient.
     *
     * @param index the input's position
     * @return true if a gradient is wanted
     */
    public boolean needsInputGrad(int index) {
        return needsInputGrad[index];
    }

    /**
     * Number of inputs the function was applied to.
     *
     * @return the count
     */
    public int inputCount() {
        return needsInputGrad.length;
    }

    /**
     * Lets the scope run the backward of these inputs' gradients with a later traversal: call it in forward for
     * inputs whose libtorch graph reaches only leaves (parameters stacked or viewed for the call) and no recorded
     * function's output. The scope then holds their gradients until a traversal runs for another reason (or its
     * backward ends) and joins them to it, where it would run one traversal for them before the next function's
     * backward. An input that is itself a recorded function's output goes to that function as always.
     *
     * @param indices input positions
     * @throws IndexOutOfBoundsException if an index is not an input's
     */
    public void deferInputGradients(int... indices) {
        boolean[] d = new boolean[needsInputGrad.length];
        for (int i : indices) {
            d[i] = true;
        }
        this.deferred = d;
    }

    /**
     * Whether {@link #deferInputGradients} named input {@code index}.
     *
     * @param index the input's position
     * @return true if its gradient's backward may wait for a later traversal
     */
    public boolean deferredInputGradient(int index) {
        return deferred != null && deferred[index];
    }

    /**
     * Keeps tensors for backward (typically detached inputs or outputs); replaces earlier ones.
     *
     * @param tensors the tensors to keep, none null
     */
    public void saveForBackward(NDArray... tensors) {
        this.saved = List.of(tensors);
    }

    /**
     * A tensor kept by {@link #saveForBackward}.
     *
     * @param index its position in that call
     * @return the tensor
     */
    public NDArray saved(int index) {
        return saved.get(index);
    }

    /**
     * Stores one non-tensor value (shapes, split sizes, indices) for backward.
     *
     * @param value any value
     */
    public void setState(Object value) {
        this.state = value;
    }

    /**
     * The value given to {@link #setState}.
     *
     * @param type its class
     * @param <T> its type
     * @return the value, cast
     */
    public <T> T state(Class<T> type) {
        return type.cast(state);
    }

    @Override
    public String toString() {
        return "FunctionContext{needsInputGrad=" + Arrays.toString(needsInputGrad) + ", saved=" + saved.size() + "}";
    }
}
