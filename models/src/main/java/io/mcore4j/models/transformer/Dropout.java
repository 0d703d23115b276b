package io.mcore4j.models.transformer;

import ai.djl.ndarray.NDArray;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.random.DeterministicRandom;

/**
 * Inverted dropout with masks from a {@link DeterministicRandom}: the one place where the model
 * decides whether to drop.
 *
 * <p>Dropout is active in a training pass ({@link AutogradScope#isTraining()}), whatever the grad
 * mode: the first run of a recomputed segment has grad off but is training, so it draws the masks
 * that its backward rerun replays ({@link DropoutReplay}) and the loss and the gradients see the
 * same dropout. In an evaluation scope it is the identity and draws nothing.
 */
public final class Dropout {
    private Dropout() {}

    /**
     * Drops each element of {@code x} with probability {@code p} and scales the rest by
     * {@code 1 / (1 - p)}, drawing one mask from {@code generator} (which advances by one draw).
     *
     * @param scope the pass's scope; owns the result
     * @param x any floating tensor of the pass; the caller still owns it (and may release it)
     * @param p the drop probability, in [0, 1)
     * @param generator the mask generator of {@code x}'s dropout region
     * @return {@code x} itself when {@code p} is 0 or the scope is not training; otherwise a new
     *     tensor of {@code x}'s shape and dtype
     * @throws IllegalArgumentException if the scope is training and {@code p} is outside [0, 1)
     */
    public static NDArray apply(AutogradScope scope, NDArray x, double p, DeterministicRandom generator) {
        if (p == 0 || !scope.isTraining()) {
            return x;
        }
        // the product's backward keeps the mask through libtorch's own reference: the handles die with the frame
        return scope.frame(x, in -> {
            NDArray keep = generator.keepMask(scope.manager(), in.getShape(), p, DataTypes.of(in));
            return Tensors.scale(in.mul(keep), 1 / (1 - p), scope.manager());
        });
    }
}
