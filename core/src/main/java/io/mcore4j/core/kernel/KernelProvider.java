package io.mcore4j.core.kernel;

import ai.djl.Device;

import java.util.Optional;

/**
 * Makes device kernels; implementations are {@link java.util.ServiceLoader} services of this
 * interface, listed by the artifact that holds them ({@code META-INF/services}).
 */
public interface KernelProvider {
    /**
     * @param kernel the kernel interface, e.g. {@link MasterAdamKernel}
     * @param device the device its tensors live on
     * @param <T> the kernel type
     * @return an implementation for the device, or empty if this provider has none
     */
    <T> Optional<T> create(Class<T> kernel, Device device);
}
