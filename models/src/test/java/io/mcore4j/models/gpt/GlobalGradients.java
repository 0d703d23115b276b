package io.mcore4j.models.gpt;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.parallel.ProcessGroups;

/** Reassembles tensor-parallel shards of gradients for comparisons with a serial model. */
final class GlobalGradients {
    private GlobalGradients() {}

    /** The global gradient of a sharded parameter: all-gather over TP along the dim its offset varies in. */
    static NDArray gatherTensorParallel(ProcessGroups groups, ShardedTensor t, NDArray grad, NDManager m) {
        long[] local = grad.getShape().getShape();
        long[] global = t.globalShape();
        for (int d = 0; d < local.length; d++) {
            if (local[d] != global[d]) {
                return groups.tp().allGather(grad, d, m);
            }
        }
        return grad;
    }
}
