package io.mcore4j.core;

import ai.djl.ndarray.NDManager;

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

    /** Initialisation-on-demand holder: the class initialiser runs exactly once, under the JVM's lock. */
    private static final class Holder {
        static {
            setIfAbsent("ai.djl.offline", "true");
            setIfAbsent("OPT_OUT_TRACKING", "true");
            // keep DJL's engine from writing a model-zoo cache or probing for other engines
            setIfAbsent("ai.djl.default_engine", "PyTorch");
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
