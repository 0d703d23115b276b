package io.mcore4j.optimizer;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.nn.Parameter;

import java.util.List;
import java.util.Objects;

/**
 * An elementwise optimizer update on flat float32 tensors: master weights, gradient and the
 * per-element state (moments) of a shard, updated in place with whole-tensor operations. Weight
 * decay is one value per shard: the optimizer's buckets are uniform in {@link #decays(Parameter)},
 * so a bucket that does not decay is updated with weight decay 0. {@link #applyAll} updates every
 * shard of a step in one call, which a rule with a multi-tensor kernel turns into one launch.
 */
interface UpdateRule {

    /**
     * One shard's part of an {@link #applyAll} call. The record holds references only: the caller
     * keeps owning the tensors, which the update changes in place.
     *
     * @param master fp32 master weights of the shard, updated in place
     * @param grad its gradient, of {@code master}'s shape, still to be divided by the call's divisor
     *     (may be modified in place)
     * @param state the state tensors, in {@link #stateNames()} order, updated in place
     * @param weightDecay weight decay applied to every element of the shard; 0 turns it off
     */
    record ShardUpdate(NDArray master, NDArray grad, List<NDArray> state, double weightDecay) {
        /**
         * @throws NullPointerException if a tensor or the state list is null
         * @throws IllegalArgumentException if {@code weightDecay} is negative, infinite or NaN
         */
        public ShardUpdate {
            Objects.requireNonNull(master, "master");
            Objects.requireNonNull(grad, "grad");
            state = List.copyOf(state);
            if (!(weightDecay >= 0) || Double.isInfinite(weightDecay)) {
                throw new IllegalArgumentException("weight decay " + weightDecay + " must be finite and >= 0");
            }
        }
    }

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
     * Updates every shard in {@code shards} in place with one learning rate and step number, after
     * dividing every gradient by {@code gradDivisor} (the loss scale over the clipping coefficient:
     * the optimizer hands over the gradients as reduced and lets the rule unscale them, which a
     * fused kernel does inside its one pass). The result is that of dividing each gradient and
     * calling {@link #apply} for each shard in list order, which is what this default does; a rule
     * with a multi-tensor kernel overrides it to launch the kernel once for all shards.
     *
     * @param shards the shards, each with its own weight decay; all on one device with one dtype
     *     where the rule launches one kernel for them; may be empty
     * @param lr learning rate
     * @param step the step number, from 1
     * @param gradDivisor what every gradient is divided by first; 1 leaves them as they are
     * @param temp manager for temporaries
     * @throws IllegalArgumentException if a shard does not have one state tensor per {@link #stateNames()}
     *     entry, or {@code gradDivisor} is not positive and finite
     */
    default void applyAll(List<ShardUpdate> shards, double lr, long step, double gradDivisor, NDManager temp) {
        requireStateCount(shards, stateNames());
        requireDivisor(gradDivisor);
        NDArray factor = null;
        for (ShardUpdate s : shards) {
            NDArray g = s.grad();
            if (gradDivisor != 1) {
                if (factor == null) {
                    factor = Tensors.scalar(1 / gradDivisor, g, temp);
                }
                g.muli(factor);
            }
            apply(s.master(), g, s.state().toArray(new NDArray[0]), lr, s.weightDecay(), step, temp);
        }
    }

    /**
     * @param gradDivisor a gradient divisor of {@link #applyAll}
     * @throws IllegalArgumentException if it is not positive and finite
     */
    static void requireDivisor(double gradDivisor) {
        if (!(gradDivisor > 0) || Double.isInfinite(gradDivisor)) {
            throw new IllegalArgumentException("gradient divisor " + gradDivisor + " must be positive and finite");
        }
    }

    /**
     * Checks, before any shard is touched, that every shard carries one state tensor per name.
     *
     * @param shards the shards of an {@link #applyAll} call
     * @param stateNames the rule's {@link #stateNames()}
     * @throws IllegalArgumentException naming the first shard whose state count differs
     */
    static void requireStateCount(List<ShardUpdate> shards, List<String> stateNames) {
        for (int i = 0; i < shards.size(); i++) {
            int count = shards.get(i).state().size();
            if (count != stateNames.size()) {
                throw new IllegalArgumentException("shard " + i + " has " + count + " state tensors; the rule keeps "
                        + stateNames.size() + " " + stateNames);
            }
        }
    }

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
        // the factor is a 0-dim device tensor (Tensors.scalar): a Java number would be a synchronising host copy
        NDArray factor = Tensors.scalar(decoupled ? 1 - lr * weightDecay : weightDecay, master, temp);
        if (decoupled) {
            master.muli(factor);
            return grad;
        }
        return grad.addi(Tensors.own(master.mul(factor), temp));
    }
}
