package io.mcore4j.models.transformer;

import ai.djl.ndarray.NDArray;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.random.DeterministicRandom;

/** Inverted dropout with masks from a {@link DeterministicRandom}; identity when not training or p = 0. */
final class Dropout {
    private Dropout() {}

    static NDArray apply(AutogradScope scope, NDArray x, double p, DeterministicRandom generator) {
        if (p == 0 || !scope.isGradEnabled()) {
            return x;
        }
        NDArray keep = generator.keepMask(scope.manager(), x.getShape(), p, x.getDataType());
        return Tensors.scale(x.mul(keep), 1 / (1 - p), scope.manager());
    }
}
