package io.mcore4j.core.nn;

import java.util.List;

/**
 * Told during backward that some parameters' gradient contributions from the current pass are
 * complete: their {@code .grad} will not change again until the next pass's backward reaches
 * them. Models report this (e.g. per transformer layer as backward leaves it) so that data-parallel
 * gradient reduction can start while backward continues. Called on the thread running backward,
 * at most once per parameter per pass, with the device work that produced the gradients already
 * enqueued; a listener must not block.
 */
@FunctionalInterface
public interface GradientReadyListener {

    /**
     * @param parameters parameters whose gradients from this pass are complete; never empty
     */
    void gradientsReady(List<Parameter> parameters);
}
