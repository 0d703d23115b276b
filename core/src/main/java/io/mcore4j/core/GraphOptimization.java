package io.mcore4j.core;

import ai.djl.engine.Engine;
import ai.djl.pytorch.jni.JniUtils;

/**
 * This thread's setting of libtorch's TorchScript graph-executor optimisation (the profiling executor that
 * records the shapes a module is called with, specialises its graph to them and fuses its ops), set for a
 * stretch of code and put back when the handle is closed. Training threads keep it on (libtorch's default):
 * the training modules rely on its fusion. A module whose tensor shapes change on every call (a generation
 * pass over a cache narrowed to the length reached) re-specialises on every call under it and runs slower
 * than the plain interpreter, so such a loop turns it off around itself.
 *
 * <p><b>The system property.</b> When {@code -Dai.djl.pytorch.graph_optimizer} is set, DJL re-applies its
 * value to the calling thread before every forward of every TorchScript module, so the property wins over
 * any value set here ({@link #overriddenByProperty()} says whether that is the case). libtorch offers DJL no
 * getter for the setting, so {@link #close()} restores {@link #threadDefault()}: the property's value when
 * it is set, else libtorch's default (on), which is what every mcore4j thread runs with outside such a
 * stretch.
 *
 * <p>Owns nothing native; thread-confined: close it on the thread that opened it.
 */
public final class GraphOptimization implements AutoCloseable {
    /** DJL's system property that, when set, fixes the setting for every forward. */
    public static final String DJL_PROPERTY = "ai.djl.pytorch.graph_optimizer";

    private final Thread owner;

    private GraphOptimization() {
        this.owner = Thread.currentThread();
    }

    /**
     * Sets this thread's graph-executor optimisation until the returned handle is closed.
     *
     * @param enabled whether TorchScript modules this thread runs are profiled, specialised and fused
     * @return the handle that restores {@link #threadDefault()}
     */
    public static GraphOptimization set(boolean enabled) {
        Mcore4j.ensureInitialized();
        Engine.getEngine("PyTorch"); // loads libtorch's JNI library, if no tensor has been made yet
        JniUtils.setGraphExecutorOptimize(enabled);
        return new GraphOptimization();
    }

    /** @return the setting a thread runs with outside {@link #set} stretches: the property's value, else on */
    public static boolean threadDefault() {
        String property = System.getProperty(DJL_PROPERTY);
        return property == null || Boolean.parseBoolean(property);
    }

    /** @return whether {@link #DJL_PROPERTY} is set, so that DJL applies it before every forward and {@link #set} has no effect */
    public static boolean overriddenByProperty() {
        return System.getProperty(DJL_PROPERTY) != null;
    }

    /**
     * Restores {@link #threadDefault()} on this thread.
     *
     * @throws IllegalStateException if called on another thread than the one that opened the handle
     */
    @Override
    public void close() {
        if (Thread.currentThread() != owner) {
            throw new IllegalStateException("graph optimisation was set on " + owner.getName() + " and is restored on "
                    + Thread.currentThread().getName() + ": the setting is per thread");
        }
        JniUtils.setGraphExecutorOptimize(threadDefault());
    }
}
