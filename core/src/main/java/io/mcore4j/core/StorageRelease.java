package io.mcore4j.core;

import ai.djl.ndarray.NDArray;

import java.util.List;

/**
 * Empties tensors in place through mcore4j's own TorchScript module
 * ({@code scripts/make_release_storage_module.py}: {@code Tensor.set_()}), so that their memory goes
 * back to the allocator while objects that libtorch keeps (a leaf's {@code .grad}) still refer to
 * them, and points tensors at other tensors' memory through a second one
 * ({@code scripts/make_share_storage_module.py}: {@code Tensor.set_(source)} with grad mode off).
 * Each module is loaded once per process, on first use, on a manager that lives as long as the
 * JVM; neither has parameters or state.
 */
final class StorageRelease {
    /** Resource path of the TorchScript archive. */
    static final String RESOURCE = "/io/mcore4j/core/torchscript/release_storage.pt";
    /** Resource path of the sharing module's TorchScript archive. */
    static final String SHARE_RESOURCE = "/io/mcore4j/core/torchscript/share_storage.pt";

    private final TorchScriptModule module;

    private StorageRelease() {
        this.module = TorchScriptModules.shared(StorageRelease.class, RESOURCE);
    }

    /** @return a handle on the process's shared module ({@link TorchScriptModules#shared}), loaded on first use */
    static StorageRelease get() {
        return new StorageRelease();
    }

    /** @param tensors tensors to empty in place */
    void release(List<NDArray> tensors) {
        if (!tensors.isEmpty()) {
            module.call(TorchScriptModule.Arg.list(tensors));
        }
    }

    /**
     * @param targets tensors to point at {@code sources}' memory, in place
     * @param sources one per target
     */
    void share(List<NDArray> targets, List<NDArray> sources) {
        if (targets.size() != sources.size()) {
            throw new IllegalArgumentException(targets.size() + " targets but " + sources.size() + " sources");
        }
        if (!targets.isEmpty()) {
            TorchScriptModules.shared(StorageRelease.class, SHARE_RESOURCE)
                    .call(TorchScriptModule.Arg.list(targets), TorchScriptModule.Arg.list(sources));
        }
    }
}
