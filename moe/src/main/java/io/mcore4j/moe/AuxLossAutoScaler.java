package io.mcore4j.moe;

import ai.djl.ndarray.NDArray;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.autograd.Function;
import io.mcore4j.core.autograd.FunctionContext;

import java.util.Objects;

/**
 * Attaches an auxiliary loss to an activation (Megatron-Core's {@code MoEAuxLossAutoScaler}):
 * forward returns the activation unchanged; backward passes the activation's gradient through
 * unchanged and gives the loss an upstream gradient of {@link AuxLossScale#get()} (read at backward
 * time), so the loss's gradient reaches every parameter and input it depends on, scaled like the
 * main loss. See {@link AuxLossScale} for why this equals adding the loss to the main loss.
 *
 * <p>The backward of every recorded function runs, whether or not the activation's gradient is
 * zero, so the loss is always back-propagated exactly once per backward pass. No communication.
 */
public final class AuxLossAutoScaler implements Function {
    private final AuxLossScale scale;

    private AuxLossAutoScaler(AuxLossScale scale) {
        this.scale = Objects.requireNonNull(scale, "scale");
    }

    /**
     * Returns {@code activation} with {@code loss} attached; in a scope without grad (evaluation,
     * the first run of a recomputed segment) returns {@code activation} itself and ignores the loss.
     *
     * @param scope the pass's scope
     * @param scale the upstream gradient the loss receives
     * @param activation any floating tensor of the pass that requires grad
     * @param loss a scalar (any shape is accepted) computed from tensors that require grad
     * @return the activation's values, as a new leaf owned by the scope when grad is recorded
     */
    public static NDArray attach(AutogradScope scope, AuxLossScale scale, NDArray activation, NDArray loss) {
        if (!scope.isGradEnabled()) {
            return activation;
        }
        return scope.apply1(new AuxLossAutoScaler(scale), activation, loss);
    }

    @Override
    public NDArray[] forward(FunctionContext ctx, NDArray... inputs) {
        ctx.setState(inputs[1]);
        return new NDArray[] {inputs[0]};
    }

    @Override
    public NDArray[] backward(FunctionContext ctx, NDArray... gradOutputs) {
        NDArray loss = ctx.state(NDArray.class);
        NDArray lossGrad = DataTypes.full(ctx.manager(), loss.getShape(), scale.get(), DataTypes.of(loss), loss.getDevice());
        return new NDArray[] {gradOutputs[0], lossGrad};
    }

    @Override
    public String name() {
        return "moe-aux-loss-auto-scaler";
    }
}
