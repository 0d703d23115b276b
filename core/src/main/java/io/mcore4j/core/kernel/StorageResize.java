package io.mcore4j.core.kernel;

import ai.djl.ndarray.NDArray;

/**
 * Frees and reallocates the memory under a tensor without touching the tensor: its shape, strides and
 * version stay as they are, so a graph that saved the tensor (or any tensor over the same memory) for
 * backward can still run backward once the memory is back and refilled. libtorch's storage resize (what
 * PyTorch's FSDP does with {@code untyped_storage().resize_(0)}); libtorch keeps it out of TorchScript, so
 * it comes from a native library. Found like a kernel: {@code Kernels.find(StorageResize.class, device)},
 * empty where the device or the build has none. ZeRO-3 uses it to release a layer's gathered weights after
 * its forward and gather them again for its backward without recomputing the layer.
 */
public interface StorageResize {
    /**
     * Frees the memory of {@code tensor}'s storage now (its storage then holds zero bytes). Every tensor over
     * that storage reads garbage or faults until {@link #restore}; nothing may read it meanwhile.
     *
     * @param tensor a tensor that is the whole of its storage (offset 0, contiguous)
     * @throws IllegalArgumentException if the tensor is not the whole of its storage
     */
    void release(NDArray tensor);

    /**
     * Gives {@code tensor}'s storage memory for all its elements again, after {@link #release}: the values are
     * undefined until written (through {@code tensor} or a collective that writes its memory). No-op where
     * the storage already holds them.
     *
     * @param tensor a tensor that is the whole of its storage (offset 0, contiguous)
     */
    void restore(NDArray tensor);
}
