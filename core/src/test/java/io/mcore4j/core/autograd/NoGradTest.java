package io.mcore4j.core.autograd;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.core.Tensors;

import java.util.concurrent.atomic.AtomicReference;

import org.junit.jupiter.api.Test;

class NoGradTest {

    @Test
    void turnsGradModeOffAndRestoresWhatItFound() {
        Mcore4j.ensureInitialized();
        boolean before = GradMode.isEnabled();
        for (boolean start : new boolean[] {true, false}) {
            GradMode.set(start);
            try (NoGrad outer = NoGrad.enter()) {
                assertFalse(GradMode.isEnabled());
                try (NoGrad inner = NoGrad.enter()) {
                    assertFalse(GradMode.isEnabled());
                }
                assertFalse(GradMode.isEnabled(), "a nested region leaves the outer one off");
            }
            assertEquals(start, GradMode.isEnabled(), "restored to " + start);
        }
        GradMode.set(before);
    }

    @Test
    void allowsInPlaceWritesToALeafAndRecordsNothing() {
        try (NDManager m = Mcore4j.newRootManager()) {
            NDArray w = m.create(new float[] {1, 2});
            w.setRequiresGradient(true);
            GradMode.set(true);
            try (NoGrad ignored = NoGrad.enter()) {
                w.muli(3);
                NDArray y = w.mul(w);
                assertFalse(Tensors.requiresGrad(y), "no graph is recorded inside");
            }
            assertArrayEquals(new float[] {3, 6}, w.toFloatArray(), 0f);
            assertTrue(GradMode.isEnabled());
        }
    }

    @Test
    void refusesToCloseOnAnotherThread() throws InterruptedException {
        Mcore4j.ensureInitialized();
        NoGrad region = NoGrad.enter();
        AtomicReference<Throwable> failure = new AtomicReference<>();
        Thread other = new Thread(() -> {
            try {
                region.close();
            } catch (Throwable t) {
                failure.set(t);
            }
        });
        other.start();
        other.join();
        region.close();
        assertTrue(failure.get() instanceof IllegalStateException, "closing elsewhere: " + failure.get());
    }
}
