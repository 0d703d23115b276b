package io.mcore4j.core.autograd;

import ai.djl.ndarray.NDArray;
import io.mcore4j.core.Tensors;

/**
 * Activation recompute (Megatron's activation checkpointing) as a {@link Function}: forward runs
 * {@link Body} without building a graph and keeps only its inputs; backward runs the body again with
 * autograd and back-propagates through that second run. Gradients are identical to running the
 * body directly; activation memory drops to the inputs.
 *
 * <p>The body must be a deterministic function of its inputs and of state that {@link Replay}
 * restores (for example a dropout generator's position). Both runs see the applying scope's
 * {@link AutogradScope#isTraining()}; only grad mode differs (off in the first run, on in the
 * rerun). A body that draws random masks must gate them on training, never on grad mode, or the
 * loss (first run) and the gradients (rerun) would see different masks. It may apply
 * communicating Functions (tensor-parallel mappings): every rank reruns the same body in backward,
 * so collectives stay matched. Parameters used by the body accumulate their gradients during the second run.
 *
 * <p>Both runs give the body inputs owned by a scope of its own, closed when the run ends: whatever
 * the body creates and does not return is freed then, and the body may {@link AutogradScope#release}
 * its intermediates earlier. The body must not release its inputs.
 */
public final class Recompute implements Function {

    /** The recomputed computation. */
    @FunctionalInterface
    public interface Body {
        /**
         * @param scope the scope to apply Functions in and to allocate from
         * @param inputs the inputs
         * @return the outputs (floating tensors)
         */
        NDArray[] run(AutogradScope scope, NDArray... inputs);
    }

    /** Captures and restores whatever non-tensor state the body consumes (random generators). */
    public interface Replay {
        /** @return a token describing the state before the forward run */
        Object capture();

        /**
         * Puts the state back to what {@code token} describes.
         *
         * @param token a value returned by {@link #capture()}
         */
        void restore(Object token);

        /** No state to replay. */
        Replay NONE = new Replay() {
            @Override
            public Object capture() {
                return null;
            }

            @Override
            public void restore(Object token) {
                // nothing
            }
        };
    }

    private final String name;
    private final Body body;
    private final Replay replay;

    /**
     * @param name used in error messages, e.g. {@code "recompute(layer 3)"}
     * @param body the computation
     * @param replay state to capture before forward and restore before the rerun
     */
    public Recompute(String name, Body body, Replay replay) {
        this.name = name;
        this.body = body;
        this.replay = replay;
    }

    @Override
    public String name() {
        return name;
    }

    @Override
    public NDArray[] forward(FunctionContext ctx, NDArray... inputs) {
        Object before = replay.capture();
        NDArray[] kept = new NDArray[inputs.length];
        for (int i = 0; i < inputs.length; i++) {
            kept[i] = Tensors.detach(inputs[i], ctx.manager());
        }
        ctx.saveForBackward(kept);
        ctx.setState(before);
        // grad off but training as the applying scope: dropout draws here the masks the rerun replays
        try (AutogradScope inner = AutogradScope.openNested(ctx.manager(), false, ctx.isTraining())) {
            // DJL gives a result the manager of its first operand: handles owned by the inner scope
            // keep the body's intermediates there, freed when it closes (and releasable in the body)
            NDArray[] local = new NDArray[inputs.length];
            for (int i = 0; i < inputs.length; i++) {
                local[i] = Tensors.detach(inputs[i], inner.manager());
            }
            NDArray[] out = body.run(inner, local);
            for (NDArray o : out) {
                o.attach(ctx.manager());
            }
            return out;
        }
    }

    @Override
    public NDArray[] backward(FunctionContext ctx, NDArray... gradOutputs) {
        Object after = replay.capture();
        replay.restore(ctx.state(Object.class));
        int n = ctx.inputCount();
        NDArray[] gradInputs = new NDArray[n];
        try (AutogradScope inner = AutogradScope.openNested(ctx.manager(), true, ctx.isTraining())) {
            NDArray[] inputs = new NDArray[n];
            for (int i = 0; i < n; i++) {
                inputs[i] = Tensors.detach(ctx.saved(i), inner.manager());
                if (ctx.needsInputGrad(i)) {
                    inputs[i].setRequiresGradient(true);
                }
            }
            NDArray[] outputs = body.run(inner, inputs);
            if (outputs.length != gradOutputs.length) {
                throw new IllegalStateException(name + ": the rerun produced " + outputs.length
                        + " outputs, the first run " + gradOutputs.length);
            }
            inner.backward(outputs, gradOutputs);
            for (int i = 0; i < n; i++) {
                if (ctx.needsInputGrad(i)) {
                    gradInputs[i] = Tensors.gradientOrZeros(inputs[i], ctx.manager());
                }
            }
        } finally {
            replay.restore(after);
        }
        return gradInputs;
    }
}
