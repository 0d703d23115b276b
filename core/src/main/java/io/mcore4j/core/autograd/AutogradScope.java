package io.mcore4j.core.autograd;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.TensorMemory;
import io.mcore4j.core.Tensors;

import java.util.ArrayList;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.Supplier;
import java.util.function.UnaryOperator;

/**
 * One forward/backward pass (a step or a micro-batch): owns every tensor created inside it, records
 * the {@link Function}s applied, and runs backward through libtorch and the Java backwards in turn.
 *
 * <p><b>How backward works.</b> {@link #apply} runs a function's forward with grad mode off and
 * returns its floating outputs as fresh autograd leaves that require grad: the libtorch graph is cut
 * there. {@link #backward} walks the recorded functions newest first. Before each one it runs
 * libtorch's backward from every tensor that has a pending gradient (one traversal for all of them:
 * {@code torch.autograd.backward} through a module of ours, {@link MultiRootBackward}), which fills
 * the {@code .grad} of the function's output leaves, except the tensors whose graph cannot reach that
 * function (made before it was applied: {@link #markMade}; stacked parameters:
 * {@link FunctionContext#deferInputGradients}), which join a later traversal;
 * then it calls the Java backward with those gradients and adds the results to the pending
 * gradients of the function's inputs. Gradients from several consumers of one tensor (residual
 * connections) therefore accumulate by linearity before its producer's backward runs; parameters
 * reached from several segments accumulate in their {@code .grad} as usual. A pending gradient of
 * a tensor that is itself a recorded function's output (functions applied one after the other, an
 * upstream gradient of such an output) is not run through libtorch: its producer gets it directly,
 * added to whatever libtorch accumulated in the output's {@code .grad} (libtorch would copy a
 * gradient handed to it for a leaf). The graph is kept
 * ({@code retain_graph}) until the scope closes, because one segment can be entered more than once.
 * The Java backward of each recorded application runs at most once (the tape is dropped after the
 * walk), so a Function may consume what its forward saved.
 *
 * <p><b>Training and grad mode.</b> Two separate properties. <em>Grad mode</em> says whether
 * autograd is recorded in this scope; <em>training</em> says whether the pass is a training pass,
 * in which stochastic layers (dropout) are active and draw their masks from generators that
 * {@link Recompute} can replay. A scope opened by {@link #open} is both; one opened by
 * {@link #openNoGrad} (evaluation, forward-only schedules) is neither. A {@link Function} that runs
 * a body in a scope of its own passes training on ({@link FunctionContext#isTraining()}): the
 * first run of a {@link Recompute} is a training scope without grad, its backward rerun a training
 * scope with grad, so both runs draw the same masks and the loss and the gradients see the same
 * dropout. Code deciding whether to drop must therefore ask {@link #isTraining()}; code deciding
 * whether to keep activations for backward (recompute, graph cuts) asks {@link #isGradEnabled()}.
 *
 * <p><b>Threads.</b> libtorch's grad mode is per thread: a scope sets it for the opening thread and
 * restores it on {@link #close()}. Scopes on different threads are independent, so several ranks
 * in one JVM run forward and backward concurrently. A scope must be used and closed by the thread
 * that opened it.
 *
 * <p><b>Memory.</b> {@link #manager()} is a child of the manager given to {@link #open}; closing the
 * scope closes it and so releases every tensor of the pass. Parameters live in a longer-lived
 * manager and keep their accumulated gradients. A tensor that the pass no longer needs can be freed
 * earlier with {@link #release}: libtorch frees an intermediate as soon as nothing refers to it,
 * but a DJL handle is such a reference and lives until its manager closes. A block of the pass
 * runs in a {@link Frame} ({@link #frame(NDArray, UnaryOperator)}) to have everything it created and
 * does not return or hand to a recorded function freed when it ends, without naming the tensors. The
 * gradient libtorch accumulates in a recorded function's output leaf ({@code .grad}) lives as long as the
 * leaf, which the retained graph keeps until the scope closes; {@link #backward} empties it
 * ({@code TensorMemory.releaseStorage}) once the function's backward, or the traversal it was handed on to,
 * has used it, so that backward does not accumulate one such gradient per function.
 */
public final class AutogradScope implements AutoCloseable {
    private final NDManager manager;
    private final boolean gradEnabled;
    private final boolean training;
    private final boolean previousGradMode;
    private final Thread owner = Thread.currentThread();
    private final List<Node> tape = new ArrayList<>();
    /** The innermost open frame, or null. */
    private Frame frame;
    /** Every tensor object a recorded node refers to (inputs, outputs); {@link #release} leaves them open. */
    private final Set<NDArray> referenced = Collections.newSetFromMap(new IdentityHashMap<>());
    /** Tensors noted by {@link #markMade}, with the number of functions recorded when they were. */
    private final Map<NDArray, Integer> madeAt = new IdentityHashMap<>();
    private boolean closed;

    private AutogradScope(NDManager parent, boolean gradEnabled, boolean training) {
        Mcore4j.ensureInitialized();
        this.manager = parent.newSubManager();
        this.gradEnabled = gradEnabled;
        this.training = training;
        this.previousGradMode = GradMode.isEnabled();
        GradMode.set(gradEnabled);
    }

    /**
     * Opens a training scope that records autograd: {@link #isGradEnabled()} and
     * {@link #isTraining()} are both true.
     *
     * @param parent the manager whose child will own this pass's tensors
     * @return the scope; close it on the same thread
     */
    public static AutogradScope open(NDManager parent) {
        return new AutogradScope(parent, true, true);
    }

    /**
     * Opens an evaluation scope (evaluation, forward-only schedules): grad mode is off, functions
     * run their forward only and nothing is recorded, {@link #backward} is refused, and
     * {@link #isTraining()} is false, so dropout is the identity.
     *
     * @param parent the manager whose child will own this pass's tensors
     * @return the scope; close it on the same thread
     */
    public static AutogradScope openNoGrad(NDManager parent) {
        return new AutogradScope(parent, false, false);
    }

    /**
     * Opens the scope in which a {@link Function} of this package runs a body of its own
     * ({@link Recompute}): grad mode as given, training inherited from the scope that applied the
     * function.
     *
     * @param parent the manager whose child will own the body's tensors
     * @param gradEnabled whether the body's run records autograd
     * @param training the applying scope's {@link #isTraining()}
     * @return the scope; close it on the same thread
     */
    static AutogradScope openNested(NDManager parent, boolean gradEnabled, boolean training) {
        return new AutogradScope(parent, gradEnabled, training);
    }

    /**
     * The manager owning the tensors this pass creates now: the innermost open {@link Frame}'s, else
     * the scope's own; closed with the frame or the scope.
     *
     * @return never null
     */
    public NDManager manager() {
        return frame == null ? manager : frame.manager();
    }

    /**
     * Opens a frame: until it is closed, {@link #manager()} is the frame's, and closing it frees
     * what the block created except what it {@link Frame#keep keeps} and what recorded functions
     * refer to.
     *
     * @return the frame; close it (innermost first) on this scope's thread
     * @throws IllegalStateException if the scope is closed or used from another thread
     */
    public Frame openFrame() {
        checkUsable();
        frame = new Frame(this, frame, manager());
        return frame;
    }

    /**
     * Runs a block of one input in a frame: {@code body} gets {@code input} lent to the frame
     * ({@link Frame#input}), and what it returns is all that outlives the block (besides what
     * recorded functions refer to).
     *
     * @param input the block's input; the caller still owns it
     * @param body the block
     * @return what {@code body} returns, owned by the enclosing frame or the scope
     */
    public NDArray frame(NDArray input, UnaryOperator<NDArray> body) {
        try (Frame f = openFrame()) {
            return f.keep(body.apply(f.input(input)));
        }
    }

    /**
     * Runs a block in a frame; see {@link #frame(NDArray, UnaryOperator)}. The block should compute
     * on tensors it did not create through {@link Frame#input}, or its first results land outside
     * the frame.
     *
     * @param body the block
     * @return what {@code body} returns, owned by the enclosing frame or the scope
     */
    public NDArray frame(Supplier<NDArray> body) {
        try (Frame f = openFrame()) {
            return f.keep(body.get());
        }
    }

    /** The scope's own manager, below every frame. */
    NDManager rootManager() {
        return manager;
    }

    /** Pops {@code f}, which must be the innermost open frame. */
    void exitFrame(Frame f) {
        if (frame != f) {
            throw new IllegalStateException("frames must close innermost first");
        }
        frame = f.parent();
    }

    /**
     * Whether this scope records autograd.
     *
     * @return false for {@link #openNoGrad} scopes
     */
    public boolean isGradEnabled() {
        return gradEnabled;
    }

    /**
     * A parameter's tensor as a Function input whose gradient the Function computes in Java: an alias (a view)
     * owned by this scope when it records autograd, else the tensor itself. The gradient handed back for the alias
     * reaches the leaf through the view's backward as a tensor nothing else refers to, so libtorch keeps it as the
     * leaf's first {@code .grad} instead of copying it (a tensor returned from Java is still referenced there).
     *
     * @param leaf a parameter's tensor
     * @return the input to pass to {@link #apply1} in its place
     */
    public NDArray parameterInput(NDArray leaf) {
        return gradEnabled ? Tensors.own(leaf.reshape(leaf.getShape()), manager) : leaf;
    }

    /**
     * Whether this is a training pass: dropout and other stochastic layers are active. Independent
     * of {@link #isGradEnabled()}: the first, no-grad run of a {@link Recompute} inside a training
     * scope is training too, so that it draws the masks its backward rerun replays.
     *
     * @return true for {@link #open} scopes and the scopes a recomputed body runs in under them;
     *     false for {@link #openNoGrad} scopes and those under them
     */
    public boolean isTraining() {
        return training;
    }

    /**
     * Number of functions recorded and not yet back-propagated.
     *
     * @return the count
     */
    public int recordedFunctions() {
        return tape.size();
    }

    /**
     * Notes that {@code tensor} exists now, so that its libtorch graph can reach the outputs of the functions recorded
     * so far only ({@link #recordedFunctions()} of them), none recorded later. When a later function's backward hands
     * {@code tensor} a gradient, the scope need not run libtorch's backward from it before the backward of the
     * functions recorded after this call: it waits for the traversal that runs before the newest function recorded
     * before this call (or one that runs earlier for another reason) and joins it, instead of running one of its
     * own. A MoE layer's routing probabilities, made before the dispatch and consumed by the combine, are such a
     * tensor: their gradient's backward through the router then joins the tokens' through the layer norm, which both
     * reach. {@link #apply} notes its inputs so itself (those not noted before); a tensor neither noted nor handed to
     * a function before has its gradient's backward run before the next function's, as always.
     *
     * @param tensor a tensor of this pass, already made
     * @return {@code tensor}
     */
    public NDArray markMade(NDArray tensor) {
        checkUsable();
        if (gradEnabled) {
            madeAt.putIfAbsent(tensor, tape.size());
        }
        return tensor;
    }

    /**
     * Applies {@code function} to {@code inputs}. If any input requires grad (and the scope records
     * autograd), the floating outputs are returned as new leaves that require grad and the
     * application is recorded for {@link #backward}.
     *
     * @param function the function
     * @param inputs its inputs, none null
     * @return its outputs, in order
     * @throws IllegalStateException if the scope is closed, already back-propagated, or used from another thread
     */
    public NDArray[] apply(Function function, NDArray... inputs) {
        checkUsable();
        boolean[] needs = new boolean[inputs.length];
        boolean any = false;
        for (int i = 0; i < inputs.length; i++) {
            if (inputs[i] == null) {
                throw new IllegalArgumentException("input " + i + " of " + function.name() + " is null");
            }
            needs[i] = gradEnabled && Tensors.requiresGrad(inputs[i]);
            any |= needs[i];
        }
        // a recorded application's tensors must live until backward: they belong to the scope, not
        // to the frame the function is applied in
        FunctionContext ctx = new FunctionContext(any ? manager : manager(), needs, training);
        NDArray[] outputs;
        GradMode.set(false);
        try {
            outputs = function.forward(ctx, inputs);
        } finally {
            GradMode.set(gradEnabled);
        }
        if (outputs == null || outputs.length == 0) {
            throw new IllegalStateException(function.name() + ".forward returned no outputs");
        }
        if (!any) {
            return outputs;
        }
        NDArray[] leaves = new NDArray[outputs.length];
        NDArray[] result = new NDArray[outputs.length];
        for (int i = 0; i < outputs.length; i++) {
            NDArray out = outputs[i];
            if (out == null) {
                throw new IllegalStateException(function.name() + ".forward returned null output " + i);
            }
            if (Tensors.isFloating(DataTypes.of(out))) {
                NDArray leaf = Tensors.detach(out, manager);
                leaf.setRequiresGradient(true);
                leaves[i] = leaf;
                result[i] = leaf;
            } else {
                result[i] = out;
            }
        }
        // an input exists now: its graph reaches only the functions recorded before this one
        for (int i = 0; i < inputs.length; i++) {
            if (needs[i]) {
                madeAt.putIfAbsent(inputs[i], tape.size());
            }
        }
        tape.add(new Node(function, ctx, inputs.clone(), leaves));
        Collections.addAll(referenced, inputs);
        if (frame != null) {
            frame.noteReferenced(inputs);
        }
        // integer outputs too: the function may have saved the very object it returned
        Collections.addAll(referenced, result);
        return result;
    }

    /**
     * Closes handles to tensors of this pass that the caller will not use again, so that their
     * memory goes back to the allocator now instead of when the scope closes (libtorch frees
     * a tensor when its last reference goes; a DJL handle is one and otherwise lives as long as its
     * manager). Closing a handle never changes results: tensors that libtorch's autograd saved for
     * backward, and storage shared with views, stay alive through libtorch's own references, so
     * memory is freed only where nothing else refers to it.
     *
     * <p>Each argument is closed unless it is one of these, which are left open:
     * <ul>
     *   <li>{@code null}, or already closed;</li>
     *   <li>a tensor this scope still refers to: an input or output of a {@link Function} applied
     *       through {@link #apply} and not yet back-propagated ({@link #backward} routes gradients
     *       through exactly those objects);</li>
     *   <li>a tensor owned by neither this scope's manager nor one of its sub-managers, such as a
     *       parameter or a caller's tensor from a longer-lived manager;</li>
     *   <li>a tensor over a Java buffer ({@link TensorMemory#borrowsHostMemory}), which backward may
     *       still read.</li>
     * </ul>
     *
     * <p>The caller must not pass a tensor it still uses or returns under another name. One object
     * can travel under two names: {@link Cast} to the same dtype, a tensor-parallel mapping at
     * tensor-parallel size 1 and a Function applied with grad off may each return their input
     * itself. Releasing a tensor that a view was taken from does not invalidate the view.
     *
     * <p>Cost: one identity-set lookup and one walk up the manager chain per argument.
     *
     * @param tensors tensors the caller is done with; entries may be null or repeat
     * @return the number of handles closed by this call
     * @throws IllegalStateException if the scope is closed or used from another thread
     */
    public int release(NDArray... tensors) {
        checkUsable();
        int count = 0;
        for (NDArray t : tensors) {
            if (t == null || t.isReleased() || referenced.contains(t) || !ownedHere(t) || TensorMemory.borrowsHostMemory(t)) {
                continue;
            }
            t.close();
            count++;
        }
        return count;
    }

    /** Whether {@code tensor}'s manager is this scope's manager or lies below it. */
    private boolean ownedHere(NDArray tensor) {
        return ownedBy(tensor, manager);
    }

    /** Whether {@code tensor}'s manager is {@code owner} or lies below it. */
    static boolean ownedBy(NDArray tensor, NDManager owner) {
        NDManager m = tensor.getManager();
        while (m != null) {
            if (m == owner) {
                return true;
            }
            NDManager parent = m.getParentManager();
            m = parent == m ? null : parent;
        }
        return false;
    }

    /**
     * Applies a single-output {@code function}; see {@link #apply}.
     *
     * @param function the function
     * @param inputs its inputs
     * @return its only output
     */
    public NDArray apply1(Function function, NDArray... inputs) {
        NDArray[] out = apply(function, inputs);
        if (out.length != 1) {
            throw new IllegalStateException(function.name() + " returned " + out.length + " outputs, expected 1");
        }
        return out[0];
    }

    /**
     * Back-propagates from a tensor with an upstream gradient of ones (a scalar loss).
     *
     * @param loss a tensor that requires grad
     */
    public void backward(NDArray loss) {
        NDArray ones = DataTypes.ones(manager, loss.getShape(), DataTypes.of(loss), loss.getDevice());
        backward(new NDArray[] {loss}, new NDArray[] {ones});
    }

    /**
     * Back-propagates from {@code outputs} with explicit upstream gradients, through every recorded
     * function, accumulating into the {@code .grad} of every leaf reached (parameters, inputs that
     * require grad). May be called once per scope.
     *
     * @param outputs tensors of this pass that require grad
     * @param grads their upstream gradients, same shapes; owned by the caller
     * @throws IllegalArgumentException if an output does not require grad or shapes differ
     */
    public void backward(NDArray[] outputs, NDArray[] grads) {
        checkUsable();
        if (frame != null) {
            throw new IllegalStateException("backward called while a frame is open");
        }
        if (!gradEnabled) {
            throw new IllegalStateException("backward called on a no-grad scope");
        }
        if (outputs.length != grads.length) {
            throw new IllegalArgumentException(outputs.length + " outputs but " + grads.length + " gradients");
        }
        Pending pending = new Pending();
        for (Node node : tape) {
            for (NDArray leaf : node.leaves) {
                if (leaf != null) {
                    pending.recordedOutputs.add(leaf);
                }
            }
        }
        for (int i = 0; i < outputs.length; i++) {
            if (!Tensors.requiresGrad(outputs[i])) {
                throw new IllegalArgumentException("output " + i + " of shape " + outputs[i].getShape()
                        + " does not require grad: nothing to back-propagate through");
            }
            checkSameShape(outputs[i], grads[i], "upstream gradient of output " + i);
            pending.add(outputs[i], grads[i], false, Integer.MAX_VALUE);
        }
        for (int n = tape.size() - 1; n >= 0; n--) {
            Node node = tape.get(n);
            pending.flush(n);
            NDArray[] gradOutputs = new NDArray[node.leaves.length];
            boolean[] ownedHere = new boolean[gradOutputs.length];
            for (int i = 0; i < gradOutputs.length; i++) {
                NDArray leaf = node.leaves[i];
                if (leaf != null) {
                    ownedHere[i] = gradientOutput(leaf, pending, gradOutputs, i);
                }
            }
            NDArray[] gradInputs;
            GradMode.set(false);
            try {
                gradInputs = node.function.backward(node.ctx, gradOutputs);
            } finally {
                GradMode.set(true);
            }
            if (gradInputs == null || gradInputs.length != node.inputs.length) {
                throw new IllegalStateException(node.function.name() + ".backward returned "
                        + (gradInputs == null ? "null" : gradInputs.length + " gradients")
                        + " for " + node.inputs.length + " inputs");
            }
            for (int i = 0; i < gradInputs.length; i++) {
                if (gradInputs[i] != null && node.ctx.needsInputGrad(i)) {
                    checkSameShape(node.inputs[i], gradInputs[i],
                            node.function.name() + " gradient for input " + i);
                    // a gradient handed on as it came (an identity's) stays its owner's; how far back its backward
                    // may reach: nothing recorded for stacked parameters, what was recorded when a noted input was made
                    int reach = node.ctx.deferredInputGradient(i) ? 0
                            : madeAt.getOrDefault(node.inputs[i], Integer.MAX_VALUE);
                    pending.add(node.inputs[i], gradInputs[i], !isBorrowed(gradInputs[i], gradOutputs, ownedHere), reach);
                }
            }
            for (int i = 0; i < gradOutputs.length; i++) {
                if (gradOutputs[i] != null && ownedHere[i] && !pending.holds(gradOutputs[i])) {
                    pending.dispose(gradOutputs[i]);
                }
            }
            pending.emptyDisposed();
        }
        pending.flush(-1);
        tape.clear();
        referenced.clear();
        madeAt.clear();
    }

    /** Whether {@code grad} is one of the gradient outputs the scope does not own (a caller's tensor). */
    private static boolean isBorrowed(NDArray grad, NDArray[] gradOutputs, boolean[] ownedHere) {
        for (int i = 0; i < gradOutputs.length; i++) {
            if (gradOutputs[i] == grad && !ownedHere[i]) {
                return true;
            }
        }
        return false;
    }

    /**
     * Sets {@code gradOutputs[i]} to the gradient of a recorded function's output {@code leaf}: what
     * libtorch accumulated in its {@code .grad}, plus what later functions handed for it directly (a
     * pending gradient of a recorded output never goes through libtorch: its producer takes it here,
     * and libtorch would copy a gradient it is handed for a leaf), or zeros.
     *
     * @return whether the scope may close the tensor after the function's backward
     */
    private boolean gradientOutput(NDArray leaf, Pending pending, NDArray[] gradOutputs, int i) {
        Entry direct = pending.take(leaf);
        NDArray accumulated = Tensors.gradientOrNull(leaf, manager);
        if (accumulated != null) {
            pending.leafGradients.add(accumulated);
        }
        if (direct == null) {
            gradOutputs[i] = accumulated != null ? accumulated
                    : DataTypes.zeros(manager, leaf.getShape(), DataTypes.of(leaf), leaf.getDevice());
            return true;
        }
        NDArray g = DataTypes.toType(direct.grad, DataTypes.of(leaf), false);
        boolean owned = direct.owned;
        if (g != direct.grad) {
            g.attach(manager);
            pending.release(direct);
            owned = true;
        }
        if (accumulated == null) {
            gradOutputs[i] = g;
            return owned;
        }
        NDArray sum = Tensors.own(accumulated.add(g), manager);
        pending.dispose(accumulated);
        if (owned) {
            pending.dispose(g);
        }
        gradOutputs[i] = sum;
        return true;
    }

    /** Closes every tensor of the pass and restores the thread's previous grad mode. */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        if (Thread.currentThread() != owner) {
            throw new IllegalStateException("scope opened on " + owner.getName() + " closed on "
                    + Thread.currentThread().getName());
        }
        closed = true;
        frame = null;
        tape.clear();
        referenced.clear();
        manager.close();
        GradMode.set(previousGradMode);
    }

    private void checkUsable() {
        if (closed) {
            throw new IllegalStateException("autograd scope is closed");
        }
        if (Thread.currentThread() != owner) {
            throw new IllegalStateException("autograd scope opened on thread " + owner.getName()
                    + " used from " + Thread.currentThread().getName());
        }
    }

    private static void checkSameShape(NDArray tensor, NDArray grad, String what) {
        if (!tensor.getShape().equals(grad.getShape())) {
            throw new IllegalArgumentException(what + " has shape " + grad.getShape()
                    + " but the tensor has shape " + tensor.getShape());
        }
    }

    /** A recorded application: its function, context, inputs and output leaves (null for integer outputs). */
    private record Node(Function function, FunctionContext ctx, NDArray[] inputs, NDArray[] leaves) {}

    /**
     * Gradients waiting to be pushed into the libtorch graph, keyed by tensor identity, in the order
     * they were first added (so flushes are deterministic).
     */
    private final class Pending {
        private final Map<NDArray, Entry> byTensor = new IdentityHashMap<>();
        private final List<Entry> entries = new ArrayList<>();
        /** Outputs of recorded functions: their gradients wait for their producer ({@link #take}) instead of a flush. */
        final Set<NDArray> recordedOutputs = Collections.newSetFromMap(new IdentityHashMap<>());
        /**
         * The {@code .grad}s of recorded functions' output leaves that the walk has taken: the retained graph keeps
         * them through the leaves until the scope closes, so closing a handle frees nothing; once used they are
         * emptied instead ({@link #dispose}). No gradient reaches a leaf after its function's backward has run (what
         * reaches it comes from later work, back-propagated before).
         */
        final Set<NDArray> leafGradients = Collections.newSetFromMap(new IdentityHashMap<>());
        private final List<NDArray> disposed = new ArrayList<>();

        /** Closes a gradient the scope owns and has used; a leaf's {@code .grad} is emptied at the next {@link #emptyDisposed}. */
        void dispose(NDArray grad) {
            if (leafGradients.remove(grad)) {
                disposed.add(grad);
            } else if (disposed.stream().noneMatch(d -> d == grad)) {
                grad.close();
            }
        }

        /** Disposes of an entry's gradient where the scope owns it. */
        void release(Entry e) {
            if (e.owned) {
                dispose(e.grad);
            }
        }

        /** Empties the disposed leaf gradients (one call for all) and closes their handles. */
        void emptyDisposed() {
            if (disposed.isEmpty()) {
                return;
            }
            TensorMemory.releaseStorage(disposed);
            for (NDArray g : disposed) {
                g.close();
            }
            disposed.clear();
        }

        /**
         * Adds {@code grad} to {@code tensor}'s pending gradient. {@code reach}: how many of the recorded functions (the
         * oldest) its backward may reach, so that it must run before theirs: 0 for a graph of leaves only
         * ({@link FunctionContext#deferInputGradients}), the count at {@link #markMade} for a noted tensor,
         * {@link Integer#MAX_VALUE} (before the next function's) otherwise; the largest contribution's holds.
         */
        void add(NDArray tensor, NDArray grad, boolean scopeOwnsGrad, int reach) {
            Entry entry = byTensor.get(tensor);
            if (entry == null) {
                entry = new Entry(tensor, grad, scopeOwnsGrad);
                entry.reach = reach;
                byTensor.put(tensor, entry);
                entries.add(entry);
                return;
            }
            entry.reach = Math.max(entry.reach, reach);
            NDArray sum = entry.grad.add(DataTypes.toType(grad, DataTypes.of(entry.grad), false));
            sum.attach(manager);
            release(entry);
            if (scopeOwnsGrad) {
                dispose(grad);
            }
            entry.grad = sum;
            entry.owned = true;
        }

        /** Removes and returns the pending gradient of {@code tensor}, or null. */
        Entry take(NDArray tensor) {
            Entry entry = byTensor.remove(tensor);
            if (entry != null) {
                entries.remove(entry);
            }
            return entry;
        }

        boolean holds(NDArray grad) {
            for (Entry e : entries) {
                if (e.grad == grad) {
                    return true;
                }
            }
            return false;
        }

        /**
         * Runs libtorch's backward from every pending tensor that is not an output of a recorded function, in one
         * traversal, before the backward of recorded function {@code next} ({@code -1}: the walk's end); not when no
         * such tensor's backward can reach that function's outputs ({@link Entry#reach}): they then join a later
         * traversal.
         */
        void flush(int next) {
            List<Entry> roots = new ArrayList<>(entries.size());
            boolean waits = true;
            for (Entry e : entries) {
                if (!recordedOutputs.contains(e.tensor)) {
                    roots.add(e);
                    waits &= e.reach <= next;
                }
            }
            if (roots.isEmpty() || waits) {
                return;
            }
            if (roots.size() == 1) {
                Entry e = roots.get(0);
                runBackward(e.tensor, DataTypes.toType(e.grad, DataTypes.of(e.tensor), false));
            } else {
                // one traversal for all roots (torch.autograd.backward through a module of ours)
                try (NDManager temp = manager.newSubManager()) {
                    List<NDArray> tensors = new ArrayList<>(roots.size());
                    List<NDArray> grads = new ArrayList<>(roots.size());
                    for (Entry e : roots) {
                        tensors.add(e.tensor);
                        NDArray g = DataTypes.toType(e.grad, DataTypes.of(e.tensor), false);
                        if (g != e.grad) {
                            g.attach(temp);
                        }
                        grads.add(g);
                    }
                    MultiRootBackward.get().run(tensors, grads);
                }
            }
            for (Entry e : roots) {
                release(e);
                byTensor.remove(e.tensor);
            }
            entries.removeAll(roots);
            emptyDisposed();
        }

        private void runBackward(NDArray root, NDArray grad) {
            Tensors.backward(root, grad, true);
        }
    }

    /** One pending gradient; {@code owned} when the scope created it and may close it early. */
    private static final class Entry {
        final NDArray tensor;
        NDArray grad;
        boolean owned;
        /** How many of the recorded functions (the oldest) its backward may reach ({@link Pending#add}). */
        int reach;

        Entry(NDArray tensor, NDArray grad, boolean owned) {
            this.tensor = tensor;
            this.grad = grad;
            this.owned = owned;
        }
    }
}
