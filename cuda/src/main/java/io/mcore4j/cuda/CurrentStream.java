package io.mcore4j.cuda;

import org.bytedeco.cuda.cudart.CUstream_st;
import org.bytedeco.javacpp.Pointer;

/**
 * The CUDA stream mcore4j's own device work (its kernels, NCCL calls and their events) is queued on by
 * the calling thread: the legacy default stream, where DJL's operations run, except while the thread
 * captures a CUDA graph ({@link CudaGraphCapture}), when it is the capture's stream, which libtorch then
 * uses as the thread's current stream too. Thread-local, like libtorch's current stream.
 */
public final class CurrentStream {
    private static final ThreadLocal<CUstream_st> CAPTURE = new ThreadLocal<>();

    private CurrentStream() {}

    /** @return the stream to queue on: null (the legacy default stream) unless this thread is capturing */
    public static CUstream_st get() {
        return CAPTURE.get();
    }

    /**
     * Whether this thread is capturing a CUDA graph: its work is recorded, not run, so it must not wait
     * for the device or query events recorded meanwhile.
     *
     * @return true inside {@link CudaGraphCapture#capture}
     */
    public static boolean capturing() {
        return CAPTURE.get() != null;
    }

    /** Makes {@code address} this thread's stream until {@link #reset()}. */
    static void capture(long address) {
        CAPTURE.set(new StreamAt(address));
    }

    /** Back to the legacy default stream. */
    static void reset() {
        CAPTURE.remove();
    }

    /** A stream handle from its address; owns nothing. */
    private static final class StreamAt extends CUstream_st {
        StreamAt(long address) {
            super((Pointer) null);
            this.address = address;
        }
    }
}
