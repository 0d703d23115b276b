package io.mcore4j.core;

import ai.djl.ndarray.NDManager;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Locale;

/**
 * Process-wide runtime settings that mcore4j applies before DJL first loads its engine.
 *
 * <p>DJL reads two settings that decide whether it touches the network: {@code ai.djl.offline}
 * (native-library downloads, model zoo look-ups) and {@code OPT_OUT_TRACKING} (the telemetry call
 * made when its engine registry initialises). mcore4j sets both so that no user needs a flag; an
 * explicit {@code -Dai.djl.offline=false} given by the user is left alone. Every mcore4j entry point
 * that creates native arrays calls {@link #ensureInitialized()} first; calling it yourself before
 * your own first DJL call covers code that reaches DJL directly.
 *
 * <p>On a machine without an NVIDIA driver, DJL's GPU detection finds a CUDA runtime library (a
 * CUDA toolkit or another program's copy) whose {@code cudaGetDeviceCount} fails, and logs "Failed to
 * detect GPU count: CUDA driver version is insufficient" at warning level on every engine start,
 * although nothing is wrong for a CPU run. Where no driver is installed (see
 * {@link #cudaDriverPresent(String, Path)}) mcore4j raises the level of that one logger,
 * {@code ai.djl.util.cuda.CudaUtils}, to error for SLF4J's simple binding
 * ({@code org.slf4j.simpleLogger.log.ai.djl.util.cuda.CudaUtils=error}), unless the user set it; on a
 * machine with a driver the warning stays, since there it means a driver too old for the runtime.
 * Other SLF4J bindings are configured by their own files.
 *
 * <p>These are JVM-wide system properties, not mutable state of mcore4j: they are written once and
 * never read back by this library.
 */
public final class Mcore4j {
    private Mcore4j() {}

    /**
     * Sets DJL's offline mode and telemetry opt-out if the user has not set them. Idempotent and
     * thread-safe; cheap after the first call.
     */
    public static void ensureInitialized() {
        Holder.touch();
    }

    /**
     * Creates a new root manager on DJL's default device, after {@link #ensureInitialized()}.
     *
     * @return a manager the caller owns and must close
     */
    public static NDManager newRootManager() {
        ensureInitialized();
        return NDManager.newBaseManager();
    }

    /**
     * Whether an NVIDIA driver is installed, as far as files tell without loading a library: on Linux
     * the kernel module's {@code /proc/driver/nvidia/version}, the {@code /dev/nvidiactl} device, or
     * WSL 2's GPU device {@code /dev/dxg}; on macOS never (CUDA has no macOS driver); on other systems
     * always (they are not inspected, so their warnings stay).
     *
     * @param osName the {@code os.name} system property
     * @param root the file-system root to look under ({@code /} outside tests)
     * @return false only where no driver can be present
     */
    static boolean cudaDriverPresent(String osName, Path root) {
        String os = osName.toLowerCase(Locale.ROOT);
        if (os.startsWith("mac") || os.startsWith("darwin")) {
            return false;
        }
        if (!os.startsWith("linux")) {
            return true;
        }
        return Files.exists(root.resolve("proc/driver/nvidia/version")) || Files.exists(root.resolve("dev/nvidiactl"))
                || Files.exists(root.resolve("dev/dxg"));
    }

    /** Initialisation-on-demand holder: the class initialiser runs exactly once, under the JVM's lock. */
    /** JavaCPP's cap on the process's resident memory, which mcore4j lifts (0) unless the user set it. */
    static final String JAVACPP_MAX_PHYSICAL_BYTES = "org.bytedeco.javacpp.maxPhysicalBytes";

    private static final class Holder {
        static {
            setIfAbsent("ai.djl.offline", "true");
            setIfAbsent("OPT_OUT_TRACKING", "true");
            // keep DJL's engine from writing a model-zoo cache or probing for other engines
            setIfAbsent("ai.djl.default_engine", "PyTorch");
            // JavaCPP (NCCL, CUDA) refuses its own small allocations once the whole process's resident memory
            // passes 4 x -Xmx; libtorch's host tensors (optimizer state offloaded to the host: 75 GiB for a
            // 7B model) are not JavaCPP's to budget
            setIfAbsent(JAVACPP_MAX_PHYSICAL_BYTES, "0");
            if (!cudaDriverPresent(System.getProperty("os.name", ""), Path.of("/"))) {
                // no driver: DJL's "Failed to detect GPU count" warning is noise on a CPU machine
                setIfAbsent("org.slf4j.simpleLogger.log.ai.djl.util.cuda.CudaUtils", "error");
            }
        }

        static void touch() {
            // the static initialiser above is the work
        }

        private static void setIfAbsent(String key, String value) {
            if (System.getProperty(key) == null) {
                System.setProperty(key, value);
            }
        }
    }
}
