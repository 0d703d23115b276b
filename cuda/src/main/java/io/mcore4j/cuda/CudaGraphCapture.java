package io.mcore4j.cuda;

import io.mcore4j.core.kernel.GraphCapture;

/**
 * {@link GraphCapture} on a CUDA device through libtorch's {@code at::cuda::CUDAGraph}
 * ({@link NativeCudaGraphs}). During {@link #capture} the calling thread's current stream, libtorch's
 * and mcore4j's own ({@link CurrentStream}), is the capture's stream, which starts after the work the
 * thread queued before; what the body allocates comes from the graph's private memory pool. The
 * capture is thread-local (CUDA's {@code cudaStreamCaptureModeThreadLocal}): libtorch's autograd
 * threads, which run backward on the stream each forward ran on, queue into it too.
 */
final class CudaGraphCapture implements GraphCapture {
    private final int device;

    /** @param device the CUDA device index */
    CudaGraphCapture(int device) {
        this.device = device;
    }

    /** @return whether the native library is loaded */
    static boolean available() {
        return NativeCudaGraphs.unavailable() == null;
    }

    @Override
    public CapturedGraph capture(Runnable body) {
        if (CurrentStream.capturing()) {
            throw new IllegalStateException("a CUDA graph capture cannot start inside another on the same thread");
        }
        long graph = NativeCudaGraphs.create(device);
        boolean captured = false;
        try {
            long stream = NativeCudaGraphs.captureBegin(graph);
            CurrentStream.capture(stream);
            try {
                body.run();
            } catch (RuntimeException | Error e) {
                try {
                    NativeCudaGraphs.captureEnd(graph);
                } catch (IllegalStateException ended) {
                    e.addSuppressed(ended);
                }
                throw e;
            } finally {
                CurrentStream.reset();
            }
            NativeCudaGraphs.captureEnd(graph);
            captured = true;
            return new Graph(graph);
        } finally {
            if (!captured) {
                NativeCudaGraphs.destroy(graph);
            }
        }
    }

    @Override
    public void releaseCachedMemory() {
        NativeCudaGraphs.emptyCache();
    }

    private static final class Graph implements CapturedGraph {
        private long handle;

        Graph(long handle) {
            this.handle = handle;
        }

        @Override
        public void replay() {
            if (handle == 0) {
                throw new IllegalStateException("the CUDA graph was closed");
            }
            NativeCudaGraphs.replay(handle);
        }

        @Override
        public void close() {
            if (handle != 0) {
                NativeCudaGraphs.destroy(handle);
                handle = 0;
            }
        }
    }
}
