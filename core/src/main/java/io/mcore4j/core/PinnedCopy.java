package io.mcore4j.core;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;

/**
 * Host-to-device copies that do not make the host wait, run through mcore4j's own TorchScript
 * module ({@code scripts/make_pinned_copy_module.py}): the host tensor is staged in pinned memory
 * and the copy is queued with {@code non_blocking}, so it runs in stream order after the kernels
 * queued before it while the host goes on queueing. DJL's own copy reads pageable memory, which CUDA
 * copies only after the stream's queued work, with the host waiting. libtorch's pinned-memory cache
 * keeps each staging block until its copy has run. The module is loaded once per process, on first
 * use, on a manager that lives as long as the JVM; it has no parameters and no state.
 */
final class PinnedCopy {
    /** Resource path of the TorchScript archive. */
    static final String RESOURCE = "/io/mcore4j/core/torchscript/pinned_copy.pt";

    private final TorchScriptModule module;

    private PinnedCopy() {
        this.module = TorchScriptModules.shared(PinnedCopy.class, RESOURCE);
    }

    /** @return a handle on the process's shared module ({@link TorchScriptModules#shared}), loaded on first use */
    static PinnedCopy get() {
        return new PinnedCopy();
    }

    /**
     * @param host an unnamed tensor on the CPU
     * @param owner the manager that owns the result; its device is the target
     * @return a copy of {@code host} on {@code owner}'s device, same dtype and shape; on a CUDA device
     *     queued without waiting (through pinned memory), elsewhere a plain copy
     */
    NDArray toDevice(NDArray host, NDManager owner) {
        try (NDManager temp = owner.newSubManager()) {
            // only its device is read; an empty tensor needs no kernel
            NDArray like = temp.zeros(new Shape(0), DataType.INT8);
            NDArray out = module.forward(new NDList(host, like)).singletonOrThrow();
            out.attach(owner);
            return out;
        }
    }
}
