package io.mcore4j.core.kernel;

import ai.djl.Device;

import java.util.Optional;
import java.util.ServiceLoader;

/** Finds device kernels among the {@link KernelProvider} services on the class path. */
public final class Kernels {
    private Kernels() {}

    /**
     * The implementation of the first provider that has one for {@code device}.
     *
     * @param kernel the kernel interface
     * @param device the device
     * @param <T> the kernel type
     * @return the kernel, or empty (no provider, or none for this device)
     */
    public static <T> Optional<T> find(Class<T> kernel, Device device) {
        for (KernelProvider provider : ServiceLoader.load(KernelProvider.class, Kernels.class.getClassLoader())) {
            Optional<T> found = provider.create(kernel, device);
            if (found.isPresent()) {
                return found;
            }
        }
        return Optional.empty();
    }
}
