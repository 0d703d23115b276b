package io.mcore4j.core.autograd;

/**
 * A region with libtorch's (per-thread) grad mode off, restored to what it was when the region is
 * closed: arithmetic on parameters and gradients records no graph, and in-place writes to leaves
 * that require grad are allowed. Use it with try-with-resources on one thread:
 *
 * <pre>{@code
 * try (NoGrad ignored = NoGrad.enter()) {
 *     weight.muli(scale);
 * }
 * }</pre>
 */
public final class NoGrad implements AutoCloseable {
    private final boolean previous;
    private final Thread owner = Thread.currentThread();

    private NoGrad() {
        previous = GradMode.isEnabled();
        if (previous) {
            GradMode.set(false);
        }
    }

    /** @return a region with grad mode off; close it on the same thread */
    public static NoGrad enter() {
        return new NoGrad();
    }

    /**
     * Restores the grad mode found on entry.
     *
     * @throws IllegalStateException if closed on another thread than the one that entered
     */
    @Override
    public void close() {
        if (Thread.currentThread() != owner) {
            throw new IllegalStateException("NoGrad entered on " + owner.getName() + " closed on "
                    + Thread.currentThread().getName());
        }
        if (previous) {
            GradMode.set(true);
        }
    }
}
