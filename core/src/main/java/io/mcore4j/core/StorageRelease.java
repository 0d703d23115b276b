package io.mcore4j.core;

import ai.djl.ndarray.NDArray;

import java.util.List;

/**
 * Empties tensors in place through mcore4j's own TorchScript module
 * ({@code scripts/make_release_storage_module.py}: {@code Tensor.set_()}), so that their memory goes
 * back to the allocator while objects that libtorch keeps (a leaf's {@code .grad}) still refer to
 * them. The module is loaded once per process, on first use, on a manager that lives as long as the
 * JVM; it has no parameters and no state.
 */
final class StorageRelease {
    /** Resource path of the TorchScript archive. */
    static final String RESOURCE = "/io/mcore4j/core/torchscript/release_storage.pt";

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
}
