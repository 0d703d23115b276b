package io.mcore4j.core.autograd;

import ai.djl.ndarray.NDArray;

/** Test function: passes every input through; backward passes every gradient through. */
final class IdentityFunction implements Function {
    @Override
    public NDArray[] forward(FunctionContext ctx, NDArray... inputs) {
        return inputs.clone();
    }

    @Override
    public NDArray[] backward(FunctionContext ctx, NDArray... gradOutputs) {
        NDArray[] out = new NDArray[gradOutputs.length];
        for (int i = 0; i < out.length; i++) {
            out[i] = ctx.needsInputGrad(i) ? gradOutputs[i] : null;
        }
        return out;
    }
}
