package io.mcore4j.optimizer;

import static io.mcore4j.core.Tensors.own;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;

import java.util.List;

/**
 * SGD as in torch.optim.SGD without dampening or Nesterov: weight decay added to the gradient,
 * then {@code buf = momentum * buf + g} (the first step leaves {@code buf = g}, since it starts at
 * zero) and {@code w -= lr * buf}. With zero momentum no state is kept.
 */
final class SgdUpdate implements UpdateRule {
    private final double momentum;

    SgdUpdate(double momentum) {
        this.momentum = momentum;
    }

    @Override
    public List<String> stateNames() {
        return momentum == 0 ? List.of() : List.of("momentum_buffer");
    }

    @Override
    public void apply(NDArray master, NDArray grad, NDArray[] state, double lr, double weightDecay, long step,
                      NDManager temp) {
        NDArray g = UpdateRule.decay(master, grad, false, lr, weightDecay, temp);
        if (momentum != 0) {
            NDArray buffer = state[0];
            buffer.muli(momentum).addi(g);
            g = buffer;
        }
        master.subi(own(g.mul(lr), temp));
    }
}
