package io.mcore4j.optimizer;

import static io.mcore4j.core.Tensors.own;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;

import java.util.List;

/**
 * Adam with bias correction as in torch.optim.Adam ({@code decoupled = false}: weight decay added
 * to the gradient) and torch.optim.AdamW ({@code decoupled = true}: weights shrunk by
 * {@code lr * weightDecay} before the update).
 */
final class AdamUpdate implements UpdateRule {
    private final double beta1;
    private final double beta2;
    private final double eps;
    private final boolean decoupled;

    AdamUpdate(double beta1, double beta2, double eps, boolean decoupled) {
        this.beta1 = beta1;
        this.beta2 = beta2;
        this.eps = eps;
        this.decoupled = decoupled;
    }

    @Override
    public List<String> stateNames() {
        return List.of("exp_avg", "exp_avg_sq");
    }

    @Override
    public void apply(NDArray master, NDArray grad, NDArray[] state, double lr, double weightDecay, long step,
                      NDManager temp) {
        NDArray expAvg = state[0];
        NDArray expAvgSq = state[1];
        NDArray g = UpdateRule.decay(master, grad, decoupled, lr, weightDecay, temp);
        expAvg.muli(beta1).addi(own(g.mul(1 - beta1), temp));
        expAvgSq.muli(beta2).addi(own(own(g.square(), temp).muli(1 - beta2), temp));
        double biasCorrection1 = 1 - Math.pow(beta1, step);
        double biasCorrection2 = 1 - Math.pow(beta2, step);
        NDArray denom = own(expAvgSq.sqrt(), temp).divi(Math.sqrt(biasCorrection2)).addi(eps);
        master.subi(own(expAvg.div(denom), temp).muli(lr / biasCorrection1));
    }
}
