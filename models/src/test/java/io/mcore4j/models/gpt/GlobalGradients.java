package io.mcore4j.models.gpt;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.transformer.LayerSpec;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.ReduceOp;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

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

    /** The groups of an in-JVM rank of a TP x CP world. */
    static ProcessGroups groups(InJvmWorld.Rank rank, int tp, int cp) {
        return groups(rank, tp, cp, List.of());
    }

    /** The same, with the context-parallel group's hierarchical levels (a2a+p2p's), innermost first. */
    static ProcessGroups groups(InJvmWorld.Rank rank, int tp, int cp, List<Integer> hierarchicalCp) {
        return rank.groups(ParallelDims.builder(tp * cp).tensorParallel(tp).contextParallel(cp)
                .hierarchicalContextParallelSizes(hierarchicalCp).build());
    }

    /** A whole two-layer GPT (embedding to loss) on one rank, seed 42: every layout builds the same global weights. */
    static GptModel twoLayers(TransformerConfig config, ProcessGroups groups, NDManager m, LayerSpec spec) {
        return GptModel.build(ModelContext.create(config, groups, m, new SeedScheme(42)), spec, new int[] {0, 1}, true, true);
    }

    /**
     * Asserts that two sets of global gradients have the same keys (at least 12) and agree element by
     * element within {@code tolerance} of each tensor's largest magnitude (at least 1e-3).
     */
    static void assertClose(Map<String, double[]> expected, Map<String, double[]> actual, double tolerance, String what) {
        assertEquals(expected.keySet(), actual.keySet(), what);
        for (Map.Entry<String, double[]> e : expected.entrySet()) {
            double[] a = e.getValue();
            double[] b = actual.get(e.getKey());
            double scale = 0;
            for (double v : a) {
                scale = Math.max(scale, Math.abs(v));
            }
            for (int i = 0; i < a.length; i++) {
                assertEquals(a[i], b[i], tolerance * Math.max(scale, 1e-3), e.getKey() + "[" + i + "] with " + what);
            }
        }
        assertTrue(expected.size() >= 12, "compared only " + expected.size() + " gradients with " + what);
    }
}
