package io.mcore4j.core.autograd;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import io.mcore4j.core.TensorMemory;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/**
 * One block of a pass (a norm, an attention, an MLP, half a transformer layer) whose dead
 * activations are freed when it ends: while a frame is open its scope's {@link AutogradScope#manager()}
 * is the frame's own, and closing the frame closes every tensor handle created in it except
 * <ul>
 *   <li>what the block returns ({@link #keep}), handed to the enclosing frame (or the scope);</li>
 *   <li>what a {@link Function} recorded by the scope refers to (its inputs, which backward routes
 *       gradients through), handed on the same way;</li>
 *   <li>tensors over a Java buffer ({@link TensorMemory#borrowsHostMemory}), handed to the scope:
 *       libtorch may read them in backward while only the handle keeps the buffer alive.</li>
 * </ul>
 * This is {@link AutogradScope#release} applied to everything the block created, at the block's
 * end: as there, closing a handle never changes results (tensors that libtorch's autograd saved
 * stay alive through its own references) and memory is freed only where nothing else refers to it.
 *
 * <p>DJL gives an op's result the manager of its first operand, so a block should compute on the
 * tensors it receives through {@link #input}, which lends them to the frame until it closes:
 * {@code x.add(y)} on the caller's {@code x} would otherwise land in the caller's manager and
 * outlive the block. Lending moves a handle between managers in Java only: a frame adds no native
 * call to the block it frees.
 *
 * <p>Frames nest and must close innermost first, on the scope's thread (try-with-resources).
 * Most blocks use {@link AutogradScope#frame(NDArray, java.util.function.UnaryOperator)}.
 */
public final class Frame implements AutoCloseable {
    private final AutogradScope scope;
    private final Frame parent;
    private final NDManager manager;
    private final List<NDArray> referenced = new ArrayList<>();
    private final List<NDArray> kept = new ArrayList<>();
    private final List<NDArray> borrowed = new ArrayList<>();
    private final List<NDManager> lenders = new ArrayList<>();
    private boolean closed;

    Frame(AutogradScope scope, Frame parent, NDManager outer) {
        this.scope = scope;
        this.parent = parent;
        this.manager = outer.newSubManager();
    }

    /**
     * Lends {@code x} to this frame until it closes, so that what the block computes from it lands in
     * the frame; on close {@code x} goes back to the manager it came from, open, whatever the block
     * did with it. The block must not close {@code x} (nor {@link AutogradScope#release} it): it is
     * still the caller's.
     *
     * @param x a tensor the block receives
     * @return {@code x} itself
     */
    public NDArray input(NDArray x) {
        checkOpen();
        NDManager lender = x.getManager();
        if (lender != manager) {
            borrowed.add(x);
            lenders.add(lender);
            x.attach(manager);
        }
        return x;
    }

    /**
     * Marks {@code x} as a result of the block: on close it moves to the enclosing frame (or the
     * scope) instead of being closed.
     *
     * @param x a result
     * @return {@code x}
     */
    public NDArray keep(NDArray x) {
        checkOpen();
        kept.add(x);
        return x;
    }

    /** The manager of this frame, {@link AutogradScope#manager()} while it is the innermost. */
    NDManager manager() {
        return manager;
    }

    Frame parent() {
        return parent;
    }

    /** Records tensors that a Function applied in this frame refers to. */
    void noteReferenced(NDArray... tensors) {
        Collections.addAll(referenced, tensors);
    }

    /**
     * Hands the kept and referenced tensors to the enclosing frame (or the scope) and closes the rest.
     *
     * @throws IllegalStateException if an inner frame is still open
     */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        scope.exitFrame(this);
        closed = true;
        // lent inputs go back first (innermost loan last in, first out), so that nothing below closes or moves them
        for (int i = borrowed.size() - 1; i >= 0; i--) {
            NDArray x = borrowed.get(i);
            if (!x.isReleased() && x.getManager() == manager) {
                x.attach(lenders.get(i));
            }
        }
        borrowed.clear();
        lenders.clear();
        NDManager outer = scope.manager();
        moveOut(kept, outer);
        moveOut(referenced, outer);
        if (parent != null) {
            parent.referenced.addAll(referenced);
        }
        kept.clear();
        referenced.clear();
        // a tensor over a Java buffer must outlive backward, which may read it: it goes to the scope
        for (NDArray t : manager.getManagedArrays()) {
            if (!t.isReleased() && TensorMemory.borrowsHostMemory(t)) {
                t.attach(scope.rootManager());
            }
        }
        manager.close();
    }

    private void moveOut(List<NDArray> tensors, NDManager outer) {
        for (NDArray t : tensors) {
            if (t != null && !t.isReleased() && AutogradScope.ownedBy(t, manager)) {
                t.attach(outer);
            }
        }
    }

    private void checkOpen() {
        if (closed) {
            throw new IllegalStateException("frame is closed");
        }
    }
}
