package io.mcore4j.core.autograd;

import ai.djl.pytorch.jni.JniUtils;

/**
 * libtorch's grad mode: the per-thread switch that decides whether operations on tensors that
 * require grad are recorded for backward. The one place outside DJL that reads or sets it; code
 * that needs a region without a graph uses {@link NoGrad}, and a pass uses {@link AutogradScope},
 * which sets the mode for its own lifetime.
 */
public final class GradMode {
    private GradMode() {}

    /** @return whether operations on this thread are recorded by autograd */
    public static boolean isEnabled() {
        return JniUtils.isGradMode();
    }

    /**
     * Sets this thread's grad mode. Prefer {@link NoGrad} or an {@link AutogradScope}, which restore
     * the previous mode; this is for a driver that switches the mode per step and restores it itself.
     *
     * @param enabled whether operations on this thread are recorded from now on
     */
    public static void set(boolean enabled) {
        JniUtils.setGradMode(enabled);
    }
}
