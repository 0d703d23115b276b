package io.mcore4j.core.kernel;

/**
 * Captures the device work a block of code queues into a graph that can be replayed without the host
 * (CUDA graphs), found like a kernel: {@code Kernels.find(GraphCapture.class, device)}, empty where the
 * device or the build has none.
 *
 * <p>While {@link #capture} runs its body, the work is recorded, not run: the body must not read device
 * results on the host or wait for the device, and everything it allocates comes from the graph's own
 * memory, which the graph keeps until it is closed. A tensor the body creates therefore holds, after each
 * {@link CapturedGraph#replay()}, what that replay computed into it, as long as the caller keeps it open;
 * a tensor created before the capture and read by the body is read afresh by each replay, so inputs are
 * given by copying into such tensors.
 */
public interface GraphCapture {
    /**
     * Records the device work {@code body} queues on the calling thread.
     *
     * @param body the work; runs once, on this thread
     * @return the graph; nothing of it has run yet
     * @throws IllegalStateException if the device refuses the capture (the body waited for the device,
     *         or did something else a graph cannot hold); the message names the cause
     */
    CapturedGraph capture(Runnable body);

    /**
     * Returns the device memory the allocator caches but no tensor uses to the device, so that a capture's
     * private memory does not sit beside the eager passes' cached memory.
     */
    void releaseCachedMemory();

    /** A captured graph: replays the recorded work on the device, in the caller's stream order. */
    interface CapturedGraph extends AutoCloseable {
        /** Queues one run of the recorded work after the work queued so far; does not wait for it. */
        void replay();

        /** Frees the graph and its memory; tensors the capture created must not be read afterwards. */
        @Override
        void close();
    }
}
