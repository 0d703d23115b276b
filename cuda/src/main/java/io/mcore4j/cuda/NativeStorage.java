package io.mcore4j.cuda;

import ai.djl.ndarray.NDArray;
import ai.djl.pytorch.engine.PtNDArray;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.TensorMemory;
import io.mcore4j.core.kernel.StorageResize;

/**
 * {@link StorageResize} through mcore4j's native library (the one {@link NativeCudaGraphs} loads;
 * {@code src/main/native/cuda_graphs.cpp}): the storage every tensor over the memory shares gets a new
 * allocation of libtorch's caching allocator, or none, and the tensors themselves are left as they were.
 * Available where that library is loaded.
 */
final class NativeStorage implements StorageResize {

    /** @return whether the native library is loaded */
    static boolean available() {
        return NativeCudaGraphs.unavailable() == null;
    }

    @Override
    public void release(NDArray tensor) {
        resize(checked(tensor), 0);
    }

    @Override
    public void restore(NDArray tensor) {
        resize(checked(tensor), tensor.size() * DataTypes.of(tensor).getNumOfBytes());
    }

    private static long checked(NDArray tensor) {
        if (!(tensor instanceof PtNDArray pt)) {
            throw new IllegalArgumentException("a storage resize needs a PyTorch-engine tensor, got "
                    + tensor.getClass().getName());
        }
        if (!TensorMemory.isContiguous(tensor)) {
            throw new IllegalArgumentException("a storage resize needs a tensor that is the whole of its storage;"
                    + " this one (shape " + tensor.getShape() + ") is not contiguous");
        }
        return pt.getHandle();
    }

    private static native void resize(long tensor, long nbytes);
}
