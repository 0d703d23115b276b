package io.mcore4j.core.autograd;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.DataTypes;

/**
 * A dtype conversion that autograd can differentiate. DJL's {@code toType} runs under libtorch's
 * no-grad guard, so the converted tensor is cut off from the graph; this Function converts the
 * gradient back to the input's dtype instead. Any pair of floating dtypes, bfloat16 included
 * (through {@link DataTypes}).
 */
public final class Cast implements Function {
    private final DataType target;

    private Cast(DataType target) {
        this.target = target;
    }

    /**
     * {@code x} in {@code dtype}, connected to {@code x}'s graph; {@code x} itself when it already has that dtype.
     *
     * @param scope the pass's scope
     * @param x any floating tensor
     * @param dtype the wanted dtype
     * @return the converted tensor
     */
    public static NDArray apply(AutogradScope scope, NDArray x, DataType dtype) {
        if (DataTypes.of(x) == dtype) {
            return x;
        }
        return scope.apply1(new Cast(dtype), x);
    }

    @Override
    public NDArray[] forward(FunctionContext ctx, NDArray... inputs) {
        ctx.setState(DataTypes.of(inputs[0]));
        NDArray out = DataTypes.toType(inputs[0], target, true);
        out.attach(ctx.manager());
        return new NDArray[] {out};
    }

    @Override
    public NDArray[] backward(FunctionContext ctx, NDArray... gradOutputs) {
        NDArray g = DataTypes.toType(gradOutputs[0], ctx.state(DataType.class), true);
        g.attach(ctx.manager());
        return new NDArray[] {g};
    }

    @Override
    public String name() {
        return "cast to " + target;
    }
}
