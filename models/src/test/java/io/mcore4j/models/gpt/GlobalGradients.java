package io.mcore4j.models.gpt;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.ReduceOp;

import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.Map;

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

    /**
     * Every gradient of a model chunk as the serial model's global tensor: sequence-parallel ones summed
     * over TP, all averaged over the context-parallel group (as the dp-cp gradient reduction does), TP
     * shards gathered; keyed by checkpoint key (collective over TP and CP).
     */
    static Map<String, double[]> averagedOverContextParallel(GptModel model, ProcessGroups groups, NDManager m) {
        Map<NDArray, NDArray> grads = new IdentityHashMap<>();
        for (Parameter p : model.parameters()) {
            NDArray g = Tensors.gradientOrZeros(p.data(), m);
            if (p.kind() == Parameter.Kind.SEQUENCE_PARALLEL) {
                g = groups.tp().allReduce(g, ReduceOp.SUM, m);
            }
            grads.put(p.data(), groups.cp().allReduce(g, ReduceOp.AVG, m));
        }
        Map<String, double[]> global = new LinkedHashMap<>();
        for (ShardedTensor t : model.shardedState("")) {
            NDArray g = grads.get(t.data());
            if (g != null) { // strided (fused SwiGLU) pieces are views, not parameters: not used here
                global.put(t.key(), gatherTensorParallel(groups, t, g, m).toType(DataType.FLOAT64, false).toDoubleArray());
            }
        }
        return global;
    }
}
