package io.mcore4j.cuda;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.nio.file.Files;
import java.nio.file.Path;

/**
 * The native side of {@link CudaGraphCapture}: libtorch's {@code at::cuda::CUDAGraph} through a small
 * library of mcore4j's ({@code src/main/native/cuda_graphs.cpp}), built on the GPU host against the
 * libtorch DJL drives ({@code scripts/gpu/build-cuda-graphs.sh}) and loaded from the path in the system
 * property {@value #LIBRARY_PROPERTY}. Without it, or where it does not load, CUDA graphs are off and
 * {@link #available()} says why, once in the log.
 */
final class NativeCudaGraphs {
    /** System property holding the path of {@code libmcore4j_cuda_graphs.so}. */
    static final String LIBRARY_PROPERTY = "mcore4j.cuda.graphs.library";
    private static final Logger LOG = LoggerFactory.getLogger(NativeCudaGraphs.class);
    private static final String UNAVAILABLE = load();

    private NativeCudaGraphs() {}

    /** @return null when the library is loaded, else why not */
    static String unavailable() {
        return UNAVAILABLE;
    }

    private static String load() {
        String path = System.getProperty(LIBRARY_PROPERTY);
        String why;
        if (path == null || path.isBlank()) {
            why = "-D" + LIBRARY_PROPERTY + " is not set (scripts/gpu/build-cuda-graphs.sh builds the library)";
        } else if (!Files.isRegularFile(Path.of(path))) {
            why = "-D" + LIBRARY_PROPERTY + "=" + path + " is no file";
        } else {
            try {
                System.load(Path.of(path).toAbsolutePath().toString());
                return null;
            } catch (UnsatisfiedLinkError e) {
                why = path + " did not load: " + e.getMessage();
            }
        }
        LOG.warn("CUDA graphs are off: {}", why);
        return why;
    }

    static native long create(int device);

    /** @return the address of the capture's stream, now the thread's current stream */
    static native long captureBegin(long graph);

    static native void captureEnd(long graph);

    static native void replay(long graph);

    static native void destroy(long graph);

    static native void emptyCache();
}
