package io.mcore4j.samples.pretrain;

import ai.djl.Device;
import io.mcore4j.core.kernel.GraphCapture;
import io.mcore4j.core.kernel.KernelProvider;

import java.util.Optional;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A stand-in for CUDA graphs on the CPU, for tests of the steps that replay them: a capture runs its body
 * once (a real capture records it without running it, and the step replays it right after), and each
 * replay runs the body again, as a real replay repeats its recorded work. Off unless {@link #enabled}.
 */
public final class ReplayingGraphCapture implements KernelProvider {
    /** Whether CPU devices get this graph support. */
    static volatile boolean enabled;
    /** Whether a capture fails as a device that refuses it does. */
    static volatile boolean refuse;
    /** Captures and replays so far, every rank together. */
    static final AtomicInteger CAPTURES = new AtomicInteger();
    static final AtomicInteger REPLAYS = new AtomicInteger();

    @Override
    public <T> Optional<T> create(Class<T> kernel, Device device) {
        if (kernel != GraphCapture.class || !enabled || device.isGpu()) {
            return Optional.empty();
        }
        return Optional.of(kernel.cast(new GraphCapture() {
            @Override
            public CapturedGraph capture(Runnable body) {
                CAPTURES.incrementAndGet();
                if (refuse) {
                    throw new IllegalStateException("CUDA graph capture begin: operation not permitted when stream is capturing");
                }
                body.run();
                boolean[] first = {true};
                return new CapturedGraph() {
                    @Override
                    public void replay() {
                        REPLAYS.incrementAndGet();
                        if (first[0]) {
                            first[0] = false; // the capture ran the body already: this replay is that run
                        } else {
                            body.run();
                        }
                    }

                    @Override
                    public void close() {}
                };
            }

            @Override
            public void releaseCachedMemory() {}
        }));
    }
}
