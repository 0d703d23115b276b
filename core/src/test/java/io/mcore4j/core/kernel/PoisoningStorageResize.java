package io.mcore4j.core.kernel;

import ai.djl.Device;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.Tensors;

import java.util.Optional;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * {@link StorageResize} for tests on the CPU, where mcore4j's native library is absent: a release overwrites
 * the memory with NaN instead of freeing it (through the released tensor's own handle, so that only its
 * version moves, never that of the other tensors over the same memory), and a restore leaves it as it is. A
 * tensor read between its release and the write that refills it then poisons every result computed from it:
 * a model that reads a released weight, in forward or backward, gives NaN where the reference gives numbers.
 * {@link Provider} hands it out while {@link Provider#enabled} is set, for modules that register the provider
 * as a {@link KernelProvider} service in their tests.
 */
public final class PoisoningStorageResize implements StorageResize {
    /** How many releases ran, in every instance. */
    public static final AtomicInteger RELEASES = new AtomicInteger();

    @Override
    public void release(NDArray tensor) {
        try (NDManager temp = tensor.getManager().newSubManager()) {
            Tensors.copyInto(tensor, DataTypes.full(temp, tensor.getShape(), Double.NaN, DataTypes.of(tensor),
                    tensor.getDevice()));
        }
        RELEASES.incrementAndGet();
    }

    @Override
    public void restore(NDArray tensor) {
        // the memory was never freed, and whatever refills it overwrites the NaN
    }

    /** The {@link KernelProvider}: a {@link PoisoningStorageResize} for any device while {@link #enabled}. */
    public static final class Provider implements KernelProvider {
        /** Whether {@link StorageResize} is handed out; tests set it around the runs that use it. */
        public static volatile boolean enabled;

        @Override
        public <T> Optional<T> create(Class<T> kernel, Device device) {
            return kernel == StorageResize.class && enabled ? Optional.of(kernel.cast(new PoisoningStorageResize()))
                    : Optional.empty();
        }
    }
}
