package io.mcore4j.optimizer;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.autograd.Function;
import io.mcore4j.core.autograd.FunctionContext;

/**
 * A dtype cast that autograd differentiates: DJL's {@code toType} returns a tensor cut off from
 * the graph, so the float16 test model casts its output to float32 through this function.
 */
final class CastFunction implements Function {
    private final DataType target;

    CastFunction(DataType target) {
        this.target = target;
    }

    @Override
    public NDArray[] forward(FunctionContext ctx, NDArray... inputs) {
        ctx.setState(inputs[0].getDataType());
        NDArray out = inputs[0].toType(target, false);
        out.attach(ctx.manager());
        return new NDArray[] {out};
    }

    @Override
    public NDArray[] backward(FunctionContext ctx, NDArray... gradOutputs) {
        NDArray grad = gradOutputs[0].toType(ctx.state(DataType.class), false);
        grad.attach(ctx.manager());
        return new NDArray[] {grad};
    }
}
