package io.mcore4j.inference.engine;

import ai.djl.Device;
import io.mcore4j.core.kernel.GraphCapture;
import io.mcore4j.core.kernel.KernelProvider;

import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A stand-in for CUDA graphs on the CPU, for tests of the engine's graphed decode steps (registered as a
 * {@link KernelProvider} in this module's test resources, as samples' tests register theirs): a capture records its
 * body without running it, as a real capture records device work without running it (so a rank whose capture fails
 * and a rank whose capture succeeds have both run nothing of the body's collectives), and each replay runs the body.
 * Off unless {@link #enabled}; the engines of a test are its only users while it is on.
 */
public final class ReplayingGraphCapture implements KernelProvider {
    /** Whether CPU devices get this graph support. */
    static volatile boolean enabled;
    /** Captures still to refuse, as a device that refuses them does, whichever rank asks first. */
    static final AtomicInteger REFUSALS = new AtomicInteger();
    /** Captures asked for (refused ones included) and replays, per thread (an engine's thread per rank). */
    static final Map<String, AtomicInteger> CAPTURES = new ConcurrentHashMap<>();
    static final Map<String, AtomicInteger> REPLAYS = new ConcurrentHashMap<>();

    /** Turns it off and forgets the counts and refusals. */
    static void reset() {
        enabled = false;
        REFUSALS.set(0);
        CAPTURES.clear();
        REPLAYS.clear();
    }

    @Override
    public <T> Optional<T> create(Class<T> kernel, Device device) {
        if (kernel != GraphCapture.class || !enabled || device.isGpu()) {
            return Optional.empty();
        }
        return Optional.of(kernel.cast(new GraphCapture() {
            @Override
            public CapturedGraph capture(Runnable body) {
                count(CAPTURES);
                if (REFUSALS.getAndUpdate(n -> Math.max(0, n - 1)) > 0) {
                    throw new IllegalStateException("operation not permitted when stream is capturing");
                }
                return new CapturedGraph() {
                    @Override
                    public void replay() {
                        count(REPLAYS);
                        body.run();
                    }

                    @Override
                    public void close() {}
                };
            }

            @Override
            public void releaseCachedMemory() {}
        }));
    }

    private static void count(Map<String, AtomicInteger> counts) {
        counts.computeIfAbsent(Thread.currentThread().getName(), k -> new AtomicInteger()).incrementAndGet();
    }
}
