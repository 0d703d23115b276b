package io.mcore4j.cuda;

import ai.djl.Device;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;

import java.util.function.Consumer;

/**
 * What the GPU check mains of this package share: the kernel under check, one {@code PASS}/{@code FAIL}
 * line per expectation, a last line and an exit status ({@code 1} on any failure), and the time per call
 * of a kernel (a printed figure, never a check).
 */
final class GpuCheck {
    private final String name;
    private int failed;

    /** @param name the check's name, printed on the last line */
    GpuCheck(String name) {
        this.name = name;
    }

    /**
     * @param kernel the kernel interface
     * @param gpu the device
     * @param <T> the kernel type
     * @return {@link CudaKernels}' implementation for {@code gpu}
     * @throws IllegalStateException if it has none
     */
    static <T> T kernel(Class<T> kernel, Device gpu) {
        return new CudaKernels().create(kernel, gpu).orElseThrow(() -> new IllegalStateException("no CUDA kernel for " + gpu));
    }

    /**
     * Prints {@code PASS what} or {@code FAIL what} and counts a failure.
     *
     * @param ok whether the expectation held
     * @param what what was expected
     */
    void expect(boolean ok, String what) {
        System.out.println((ok ? "PASS " : "FAIL ") + what);
        if (!ok) {
            failed++;
        }
    }

    /** Prints the last line and exits, with status 1 if an expectation failed. */
    void exit() {
        System.out.println(failed == 0 ? name + ": all passed" : name + ": " + failed + " failed");
        System.exit(failed == 0 ? 0 : 1);
    }

    /**
     * Prints {@code TIME what: <µs> us per call}: {@code calls} calls of {@code call} (each given a manager
     * closed after it) after {@code warmup} more, between two reads from the device (which wait for it).
     *
     * @param m a manager on the device
     * @param what the label
     * @param warmup untimed calls first
     * @param calls timed calls
     * @param call one call
     */
    static void time(NDManager m, String what, int warmup, int calls, Consumer<NDManager> call) {
        long start = 0;
        for (int i = -warmup; i < calls; i++) {
            if (i == 0) {
                m.zeros(new Shape(1)).getFloat(0);
                start = System.nanoTime();
            }
            try (NDManager temp = m.newSubManager()) {
                call.accept(temp);
            }
        }
        m.zeros(new Shape(1)).getFloat(0);
        System.out.printf("TIME %s: %.1f us per call%n", what, (System.nanoTime() - start) / 1e3 / calls);
    }
}
