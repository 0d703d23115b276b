package io.mcore4j.core.nn;

import ai.djl.ndarray.NDArray;
import io.mcore4j.core.autograd.AutogradScope;

/**
 * A module that maps one activation tensor to one within a pass (a norm, an MLP, a transformer
 * layer): what {@link Sequential} chains.
 */
public interface UnaryModule extends Module {
    /**
     * @param scope the pass's scope; it owns what the module creates
     * @param input the activations; the module neither closes nor releases them
     * @return the output, owned by the scope's manager
     */
    NDArray forward(AutogradScope scope, NDArray input);
}
