package io.mcore4j.core.nn;

import java.util.List;

/**
 * Parameters that hold their values only while a module reads them: ZeRO-3
 * ({@code --data-parallel-sharding-strategy optim_grads_params}), where each rank keeps a shard and the
 * whole parameters are all-gathered before use and emptied after. A model that supports it names the
 * parameters through {@link #beforeForward} before every read (the forward's, and the rerun in backward
 * of a recomputed layer), and through {@link #afterUse} once it will not read them again before the next
 * {@link #beforeForward}: after a layer's forward ran without keeping a graph, and after its backward.
 * A graph that saved a parameter for backward must never see {@link #afterUse} before that backward,
 * since emptying a tensor moves its version counter; models therefore recompute the layers whose
 * parameters they release. Called on the thread running forward and backward.
 */
public interface ParameterResidency extends ForwardPreHook {

    /**
     * @param parameters parameters that will not be read before they are named again to
     *     {@link #beforeForward}; never empty
     */
    void afterUse(List<Parameter> parameters);
}
