package io.mcore4j.optimizer;

import io.mcore4j.core.nn.Parameter;
import io.mcore4j.parallel.ProcessGroups;

import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Set;

/** Builds {@link MegatronOptimizer}s. */
public final class Optimizers {
    private Optimizers() {}

    /**
     * An optimizer over the DDP wrapper's buckets whose checkpoint keys are positional
     * ({@link ParameterLayout#byPosition}); pass a layout to get layout-independent keys.
     *
     * @param params the parameters to optimise: exactly the wrapper's
     * @param ddp the gradient buckets
     * @param groups this rank's groups (the wrapper's)
     * @param config the optimizer options; must agree with the wrapper's on the distributed optimizer
     * @return the optimizer, holding master weights (and moments) initialised from the parameters
     */
    public static MegatronOptimizer create(List<Parameter> params, DistributedDataParallel ddp, ProcessGroups groups,
                                           OptimizerConfig config) {
        return create(params, ddp, groups, config, ParameterLayout.byPosition(params, groups));
    }

    /**
     * An optimizer over the DDP wrapper's buckets.
     *
     * @param params the parameters to optimise: exactly the wrapper's
     * @param ddp the gradient buckets
     * @param groups this rank's groups (the wrapper's)
     * @param config the optimizer options; must agree with the wrapper's on the distributed optimizer
     * @param layout checkpoint keys of the parameters, used by the one-argument checkpoint methods
     * @return the optimizer
     * @throws IllegalArgumentException if the parameters, groups or sharding differ from the wrapper's
     */
    public static MegatronOptimizer create(List<Parameter> params, DistributedDataParallel ddp, ProcessGroups groups,
                                           OptimizerConfig config, ParameterLayout layout) {
        Set<Parameter> mine = Collections.newSetFromMap(new IdentityHashMap<>());
        mine.addAll(params);
        Set<Parameter> wrapped = Collections.newSetFromMap(new IdentityHashMap<>());
        wrapped.addAll(ddp.parameters());
        if (!mine.equals(wrapped) || params.size() != ddp.parameters().size()) {
            throw new IllegalArgumentException("the optimizer's " + params.size() + " parameters are not the "
                    + ddp.parameters().size() + " parameters of the data-parallel wrapper");
        }
        if (groups.worldRank() != ddp.groups().worldRank()) {
            throw new IllegalArgumentException("groups of rank " + groups.worldRank()
                    + " differ from the wrapper's groups of rank " + ddp.groups().worldRank());
        }
        if (config.useDistributedOptimizer() != ddp.usesDistributedOptimizer()) {
            throw new IllegalArgumentException("the optimizer config has useDistributedOptimizer="
                    + config.useDistributedOptimizer() + " but the data-parallel wrapper was built with "
                    + ddp.usesDistributedOptimizer());
        }
        return new MasterWeightOptimizer(ddp, groups, config, layout);
    }
}
