package io.mcore4j.optimizer;

import ai.djl.pytorch.jni.JniUtils;

/**
 * Turns libtorch's (per-thread) grad mode off until closed, so that optimizer arithmetic on
 * parameters and gradients records no graph and in-place writes to parameters are allowed.
 */
final class NoGrad implements AutoCloseable {
    private final boolean previous;

    private NoGrad() {
        previous = JniUtils.isGradMode();
        JniUtils.setGradMode(false);
    }

    /** @return a region with grad mode off; close it on the same thread */
    static NoGrad enter() {
        return new NoGrad();
    }

    @Override
    public void close() {
        JniUtils.setGradMode(previous);
    }
}
