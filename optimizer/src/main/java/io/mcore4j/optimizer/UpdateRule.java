package io.mcore4j.optimizer;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;

import java.util.List;

/**
 * An elementwise optimizer update on flat float32 tensors: master weights, gradient and the
 * per-element state (moments) of one shard, updated in place with whole-tensor operations.
 */
interface UpdateRule {

    /** @return names of the per-element state tensors, e.g. {@code exp_avg}; also their checkpoint key suffixes */
    List<String> stateNames();

    /**
     * Updates {@code master} and {@code state} in place.
     *
     * @param master fp32 master weights of the shard
     * @param grad its unscaled, clipped gradient (may be modified)
     * @param state the state tensors, in {@link #stateNames()} order
     * @param decayMask boolean mask of elements that decay, or null when all of them do
     * @param lr learning rate
     * @param weightDecay weight decay (0 when no element of the shard decays)
     * @param step the step number, from 1
     * @param temp manager for temporaries
     */
    void apply(NDArray master, NDArray grad, NDArray[] state, NDArray decayMask, double lr, double weightDecay,
               long step, NDManager temp);

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
     * {@code weightDecay * master}, masked: the L2 term added to the gradient, or (times lr) the
     * decoupled decay subtracted from the weights. Multiplying by a boolean mask leaves decayed
     * elements bitwise unchanged, so sharded and whole buffers give the same result.
     */
    static NDArray decayTerm(NDArray master, NDArray decayMask, double factor, NDManager temp) {
        NDArray d = FlatTensors.own(master.mul(factor), temp);
        return decayMask == null ? d : FlatTensors.own(d.mul(decayMask), temp);
    }
}
