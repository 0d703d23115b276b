package io.mcore4j.optimizer;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import io.mcore4j.core.nn.Parameter;

import java.util.List;

/**
 * An elementwise optimizer update on flat float32 tensors: master weights, gradient and the
 * per-element state (moments) of one shard, updated in place with whole-tensor operations. Weight
 * decay is one value for the whole call: the optimizer's buckets are uniform in
 * {@link #decays(Parameter)}, so a bucket that does not decay is updated with weight decay 0.
 */
interface UpdateRule {

    /** @return names of the per-element state tensors, e.g. {@code exp_avg}; also their checkpoint key suffixes */
    List<String> stateNames();

    /**
     * Updates {@code master} and {@code state} in place.
     *
     * @param master fp32 master weights of the shard
     * @param grad its unscaled, clipped gradient, float32 (may be modified in place)
     * @param state the state tensors, in {@link #stateNames()} order
     * @param lr learning rate
     * @param weightDecay weight decay applied to every element; 0 turns it off
     * @param step the step number, from 1
     * @param temp manager for temporaries
     */
    void apply(NDArray master, NDArray grad, NDArray[] state, double lr, double weightDecay, long step, NDManager temp);

    /**
     * Whether weight decay applies to a parameter: to tensors of two or more dims (matrices,
     * embeddings), never to biases and norm weights. The one definition of that rule.
     *
     * @param p a parameter
     * @return true if it decays
     */
    static boolean decays(Parameter p) {
        return p.data().getShape().dimension() > 1;
    }

    /**
     * The rule a configuration asks for.
     *
     * @param config the algorithm and its constants
     * @param owner manager of anything the rule loads (the fused kernel's module)
     * @return the rule
     */
    static UpdateRule of(OptimizerConfig config, NDManager owner) {
        boolean fused = config.fusedAdam();
        return switch (config.algorithm()) {
            case ADAM -> fused ? new FusedAdamUpdate(config.beta1(), config.beta2(), config.eps(), false, owner)
                    : new AdamUpdate(config.beta1(), config.beta2(), config.eps(), false);
            case ADAMW -> fused ? new FusedAdamUpdate(config.beta1(), config.beta2(), config.eps(), true, owner)
                    : new AdamUpdate(config.beta1(), config.beta2(), config.eps(), true);
            case SGD -> new SgdUpdate(config.sgdMomentum());
        };
    }

    /**
     * Applies weight decay the way torch does: decoupled (AdamW) shrinks {@code master} in place by
     * {@code 1 - lr * weightDecay}; coupled (L2; Adam, SGD) adds {@code weightDecay * master} to
     * {@code grad} in place. Nothing happens when {@code weightDecay} is 0.
     *
     * @param master fp32 master weights, shrunk in place when decoupled
     * @param grad the gradient, modified in place when coupled
     * @param decoupled AdamW's decoupled decay instead of the L2 term
     * @param lr learning rate
     * @param weightDecay weight decay
     * @param temp manager for temporaries
     * @return {@code grad}, the gradient the update continues with
     */
    static NDArray decay(NDArray master, NDArray grad, boolean decoupled, double lr, double weightDecay, NDManager temp) {
        if (weightDecay == 0) {
            return grad;
        }
        if (decoupled) {
            master.muli(1 - lr * weightDecay);
            return grad;
        }
        return grad.addi(FlatTensors.own(master.mul(weightDecay), temp));
    }
}
