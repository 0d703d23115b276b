package io.mcore4j.models.transformer;

import ai.djl.ndarray.NDArray;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.nn.Module;
import io.mcore4j.tensorparallel.LinearOutput;

/** A linear layer as the model sees it: the spec decides whether it is column- or row-parallel. */
public interface Linear extends Module {
    /**
     * @param scope the pass's scope
     * @param input activations
     * @return the output, and the bias when the layer was built with skip-bias-add
     */
    LinearOutput forward(AutogradScope scope, NDArray input);
}
