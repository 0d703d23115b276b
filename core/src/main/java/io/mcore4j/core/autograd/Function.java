package io.mcore4j.core.autograd;

import ai.djl.ndarray.NDArray;

/**
 * An operation whose backward pass is written in Java, the JVM counterpart of
 * {@code torch.autograd.Function}. Parallel mappings (all-reduce in the backward of
 * copy-to-tensor-parallel-region, and so on) are Functions.
 *
 * <p>Contract:
 * <ul>
 *   <li>{@link #forward} runs with libtorch grad mode off. It must not modify its inputs in place
 *       and returns new tensors (returning an input unchanged is allowed: the scope detaches every
 *       output). Floating-point outputs become autograd leaves of the caller's graph; integer
 *       outputs are returned as they are and never receive gradients.</li>
 *   <li>{@link #backward} receives one gradient per output, never null (zeros where an output was
 *       unused) in the output's dtype, and returns one entry per input: the gradient with respect
 *       to that input, or {@code null} where the input needs none
 *       ({@link FunctionContext#needsInputGrad(int)}). It runs with grad mode off. A backward that
 *       communicates is called on every rank whether or not its upstream gradient is zero, so
 *       collectives stay matched across ranks.</li>
 *   <li>Everything the two methods allocate should be owned by {@link FunctionContext#manager()},
 *       which is closed with the scope.</li>
 * </ul>
 * Implementations may be stateless and reused for many applications: per-application state lives
 * in the {@link FunctionContext}.
 */
public interface Function {

    /**
     * Computes the outputs.
     *
     * @param ctx per-application context: save tensors for backward here
     * @param inputs the inputs, in the order given to {@link AutogradScope#apply}
     * @return the outputs, at least one
     */
    NDArray[] forward(FunctionContext ctx, NDArray... inputs);

    /**
     * Computes gradients with respect to the inputs.
     *
     * @param ctx the context that {@link #forward} filled in
     * @param gradOutputs one gradient per output of {@link #forward}
     * @return one entry per input, {@code null} where no gradient is produced
     */
    NDArray[] backward(FunctionContext ctx, NDArray... gradOutputs);

    /**
     * A short name used in error messages, e.g. {@code "reduce-from-tensor-parallel-region"}.
     *
     * @return never null
     */
    default String name() {
        return getClass().getSimpleName();
    }
}
