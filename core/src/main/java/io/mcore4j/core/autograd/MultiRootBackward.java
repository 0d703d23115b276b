package io.mcore4j.core.autograd;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDList;
import io.mcore4j.core.TorchScriptModule;
import io.mcore4j.core.TorchScriptModules;

import java.util.List;

/**
 * Back-propagation from several roots in one traversal of libtorch's graph, through mcore4j's
 * TorchScript module ({@code scripts/make_multi_root_backward_module.py}:
 * {@code torch.autograd.backward(roots, grads, retain_graph=True)}); DJL's JNI starts backward from
 * one tensor only. The module is loaded once per process, on first use, on a manager that lives as
 * long as the JVM; it has no parameters and no state.
 */
final class MultiRootBackward {
    /** Resource path of the TorchScript archive. */
    static final String RESOURCE = "/io/mcore4j/core/torchscript/multi_root_backward.pt";
    /** DJL packs inputs named {@code <name>[]} into one TorchScript list argument, in order. */
    private static final String ROOTS = "roots[]";
    private static final String GRADS = "grads[]";

    private final TorchScriptModule module;

    private MultiRootBackward() {
        this.module = TorchScriptModules.shared(MultiRootBackward.class, RESOURCE);
    }

    /** @return a handle on the process's shared module ({@link TorchScriptModules#shared}), loaded on first use */
    static MultiRootBackward get() {
        return new MultiRootBackward();
    }

    /**
     * Accumulates into the leaves behind {@code roots} the gradients that {@code grads} (one per
     * root, of its shape and dtype) induce, keeping the graph. Runs with the thread's grad mode.
     *
     * @param roots tensors that require grad
     * @param grads their upstream gradients
     */
    void run(List<NDArray> roots, List<NDArray> grads) {
        int n = roots.size();
        String[] names = new String[2 * n];
        NDList inputs = new NDList(2 * n);
        for (int i = 0; i < n; i++) {
            names[i] = roots.get(i).getName();
            names[n + i] = grads.get(i).getName();
        }
        try {
            for (int i = 0; i < n; i++) {
                roots.get(i).setName(ROOTS);
                inputs.add(roots.get(i));
            }
            for (int i = 0; i < n; i++) {
                grads.get(i).setName(GRADS);
                inputs.add(grads.get(i));
            }
            module.forward(inputs).close();
        } finally {
            for (int i = 0; i < n; i++) {
                roots.get(i).setName(names[i]);
                grads.get(i).setName(names[n + i]);
            }
        }
    }
}
