package io.mcore4j.core.kernel;

import ai.djl.Device;
import ai.djl.ndarray.NDArray;

/**
 * Reads small int64 device tensors on the host without stopping the device's queue: a copy into host memory is queued
 * behind the work queued so far, and the host waits for that copy alone when it wants the values, while later work
 * (queued after the copy) keeps the device busy. Found like a kernel: {@code Kernels.find(HostReadback.class, device)},
 * empty where the device has none (the CPU, whose tensors are read directly).
 */
public interface HostReadback {
    /**
     * A buffer for {@code device}: from its readback where it has one, else one whose {@link Buffer#copyFrom} reads the
     * values at once (the CPU).
     *
     * @param device the device of the tensors to read
     * @param capacity the most int64 values one copy carries (where the device has a readback)
     * @return an open buffer; close it to free it
     */
    static Buffer open(Device device, int capacity) {
        return Kernels.find(HostReadback.class, device).map(r -> r.open(capacity))
                .orElseGet(ImmediateReadback::new);
    }

    /**
     * @param capacity the most int64 values one copy carries
     * @return a host buffer with its own completion marker; close it to free both
     */
    Buffer open(int capacity);

    /** Host memory one device tensor at a time is copied into; driven by one thread. */
    interface Buffer extends AutoCloseable {
        /**
         * Queues a copy of {@code source} after the work queued so far on the calling thread's stream; returns at once.
         *
         * @param source a contiguous int64 tensor of at most the buffer's capacity, on the buffer's device
         * @throws IllegalArgumentException naming the tensor's dtype or size if it does not fit
         */
        void copyFrom(NDArray source);

        /**
         * Waits until the last {@link #copyFrom} has landed and returns its values.
         *
         * @return the values, as many as the copied tensor held
         * @throws IllegalStateException if no copy was queued
         */
        long[] await();

        @Override
        void close();
    }
}
