package io.mcore4j.core.nn;

import java.util.List;

/**
 * Parameters that hold their values only while a module reads them: ZeRO-3
 * ({@code --data-parallel-sharding-strategy optim_grads_params}), where each rank keeps a shard and the
 * whole parameters are all-gathered before use and emptied after. A model that supports it names the
 * parameters through {@link #beforeForward} before every read (the forward's, the rerun in backward of a
 * recomputed layer, and the backward of a layer that kept its graph), and through {@link #afterUse} once it
 * will not read them again before the next {@link #beforeForward}: after a layer's forward, and after its
 * backward. Where the residency does not {@link #keepsSavedTensors keep saved tensors valid}, a graph that
 * saved a parameter for backward must never see {@link #afterUse} before that backward, since emptying a
 * tensor moves its version counter; models then recompute the layers whose parameters they release.
 * Called on the thread running forward and backward.
 */
public interface ParameterResidency extends ForwardPreHook {

    /**
     * @param parameters parameters that will not be read before they are named again to
     *     {@link #beforeForward}; never empty
     */
    void afterUse(List<Parameter> parameters);

    /**
     * @return whether released parameters keep their identity, shape and version, so that a graph that saved
     *     them runs backward once they are named to {@link #beforeForward} again: a layer may then keep its graph
     *     and still have its parameters released between its forward and its backward
     */
    default boolean keepsSavedTensors() {
        return false;
    }
}
