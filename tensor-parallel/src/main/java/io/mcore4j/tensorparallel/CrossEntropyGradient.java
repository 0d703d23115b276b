package io.mcore4j.tensorparallel;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.TorchScriptModule;
import io.mcore4j.core.TorchScriptModules;

/**
 * The cross-entropy's backward on one tensor-parallel rank without label smoothing, through
 * mcore4j's own TorchScript module ({@code scripts/make_cross_entropy_grad_module.py}):
 * {@code (exp(logProbs) − onehot(target))·g} in the logits' dtype, its elementwise chain one
 * expression that libtorch's graph fuser runs as one kernel on CUDA (one read of the float32
 * log-probabilities instead of four passes). The module is loaded once per process, on first use, on
 * a manager that lives as long as the JVM; it has no parameters and no state.
 */
final class CrossEntropyGradient {
    /** Resource path of the TorchScript archive. */
    static final String RESOURCE = "/io/mcore4j/tensorparallel/cross_entropy_grad.pt";

    private final TorchScriptModule module;

    private CrossEntropyGradient() {
        this.module = TorchScriptModules.shared(CrossEntropyGradient.class, RESOURCE);
    }

    /** @return a handle on the process's shared module ({@link TorchScriptModules#shared}), loaded on first use */
    static CrossEntropyGradient get() {
        return new CrossEntropyGradient();
    }

    /**
     * @param logProbs float32 log-probabilities {@code [..., V]}
     * @param ids the targets {@code [..., 1]}, int64
     * @param grad the upstream gradient of each token's loss {@code [..., 1]}, float32
     * @param dtype the gradient's dtype (the logits')
     * @param owner manager that owns the result
     * @return the gradient of the logits, {@code logProbs}' shape, in {@code dtype}
     */
    NDArray compute(NDArray logProbs, NDArray ids, NDArray grad, DataType dtype, NDManager owner) {
        try (NDManager temp = owner.newSubManager()) {
            // only its dtype is read; an empty tensor needs no memory
            NDArray like = DataTypes.empty(temp, new Shape(0), dtype, logProbs.getDevice());
            NDArray out = module.forward(new NDList(logProbs, ids, grad, like)).singletonOrThrow();
            out.attach(owner);
            return out;
        }
    }
}
