package io.mcore4j.core.nn;

import java.util.List;

/**
 * Told during forward, before some parameters are first read: the counterpart of
 * {@link GradientReadyListener} at the start of a module's forward (PyTorch's and Megatron's
 * forward pre-hook). Models call it (e.g. per transformer layer, before the layer runs) so that
 * the data-parallel all-gather of updated parameters can run while earlier layers compute, and is
 * waited on only just before a parameter of its bucket is used. Called on the thread running
 * forward, before any device work that reads the parameters is enqueued; it may make that thread's
 * later device work wait, and it may write the parameters' values in place (with grad mode off).
 */
@FunctionalInterface
public interface ForwardPreHook {

    /**
     * @param parameters parameters the forward is about to read; never empty. A parameter may be
     *     named again in later calls (every micro-batch runs every layer's forward)
     */
    void beforeForward(List<Parameter> parameters);
}
