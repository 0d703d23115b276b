package io.mcore4j.optimizer;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.ArrayList;
import java.util.List;

import org.junit.jupiter.api.Test;

/**
 * Optimizer state of strided parameters (fused weights whose tensor-parallel part is one slice of
 * each fused tensor) is saved in global coordinates, so it reloads at other tensor-parallel sizes,
 * with and without the distributed optimizer, each element at its global place.
 */
class StridedStateReshardTest {
    private static final String PREFIX = "optimizer.";
    private static final ParameterLayout LAYOUT = ParameterLayout.byKey(Parameter::name);

    /** A global weight: name, shape, split dim (-1: replicated) and stride. */
    private record Weight(String name, long[] shape, int dim, int stride) {
        int numel() {
            return (int) new Shape(shape).size();
        }

        /** Distinct values per weight, so a misplaced element or a mixed-up weight shows. */
        float[] values() {
            float[] v = new float[numel()];
            for (int i = 0; i < v.length; i++) {
                v[i] = 1000 * name.length() + i;
            }
            return v;
        }
    }

    private static final List<Weight> WEIGHTS = List.of(
            new Weight("fc1.weight", new long[] {8, 3}, 0, 2), // [gate; up] rows
            new Weight("fc1.bias", new long[] {8}, 0, 2),
            new Weight("proj.weight", new long[] {4, 8}, 1, 2), // strided along columns
            new Weight("fc2.weight", new long[] {3, 4}, 1, 1),
            new Weight("norm.weight", new long[] {5}, -1, 1));

    /**
     * This rank's part of {@code w} at tensor-parallel rank {@code index} of {@code count}, cut here by
     * the convention (global dim cut into count * stride chunks; the part is chunks index,
     * index + count, ...), independently of the code under test.
     */
    private static float[] part(Weight w, float[] full, int index, int count) {
        if (w.dim() < 0) {
            return full.clone();
        }
        long[] shape = w.shape();
        long len = shape[w.dim()] / ((long) count * w.stride());
        long inner = 1;
        for (int d = w.dim() + 1; d < shape.length; d++) {
            inner *= shape[d];
        }
        long outer = w.numel() / (shape[w.dim()] * inner);
        float[] out = new float[(int) (w.numel() / count)];
        int k = 0;
        for (long o = 0; o < outer; o++) {
            for (int j = 0; j < w.stride(); j++) {
                long first = (j * (long) count + index) * len;
                for (long r = first; r < first + len; r++) {
                    for (long i = 0; i < inner; i++) {
                        out[k++] = full[(int) ((o * shape[w.dim()] + r) * inner + i)];
                    }
                }
            }
        }
        return out;
    }

    private static List<Parameter> parameters(NDManager manager, int tpRank, int tp, boolean zeros) {
        List<Parameter> params = new ArrayList<>();
        for (Weight w : WEIGHTS) {
            long[] local = w.shape().clone();
            Parameter.Partition partition = Parameter.Partition.NONE;
            if (w.dim() >= 0) {
                local[w.dim()] /= tp;
                partition = new Parameter.Partition(w.dim(), tpRank, tp, w.stride());
            }
            float[] values = zeros ? new float[(int) new Shape(local).size()] : part(w, w.values(), tpRank, tp);
            NDArray data = manager.create(values, new Shape(local));
            params.add(new Parameter(w.name(), data, partition, Parameter.Kind.DENSE));
        }
        return params;
    }

    /**
     * Builds the optimizer at {@code world} ranks and tensor-parallel size {@code tp} (the rest data
     * parallel), from the weights' values or, with {@code load}, from zeros and then the loaded
     * state; saves its state into {@code save}.
     */
    private static void run(int world, int tp, OptimizerConfig config, InMemoryCheckpoint load, InMemoryCheckpoint save) {
        InJvmWorld.run(world, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.of(world, tp, 1));
            List<Parameter> params = parameters(rank.manager(), groups.tensorParallelRank(), tp, load != null);
            DistributedDataParallel ddp = new DistributedDataParallel(params, groups, config, List.of());
            MegatronOptimizer optimizer = Optimizers.create(params, ddp, groups, config, LAYOUT);
            if (load != null) {
                try (NDManager temp = rank.manager().newSubManager()) {
                    List<ShardedTensor> wanted = optimizer.shardedState(PREFIX, LAYOUT, temp);
                    optimizer.loadShardedState(PREFIX, load.load(wanted, temp));
                }
            }
            save.save(optimizer.shardedState(PREFIX));
            optimizer.close();
            ddp.close();
            params.forEach(Parameter::close);
            return null;
        });
    }

    private static void assertGlobalValues(InMemoryCheckpoint checkpoint, String layout) {
        checkpoint.assertCompleteAndDisjoint();
        for (Weight w : WEIGHTS) {
            for (String state : List.of("fp32_param", "exp_avg", "exp_avg_sq")) {
                double[] saved = checkpoint.values(PREFIX + w.name() + "." + state);
                assertNotNull(saved, layout + ": " + w.name() + "." + state + " not saved under its plain key; saved "
                        + checkpoint.keys());
                assertEquals(w.numel(), saved.length, layout + " " + w.name());
            }
            float[] expected = w.values();
            double[] master = checkpoint.values(PREFIX + w.name() + ".fp32_param");
            double[] want = new double[expected.length];
            for (int i = 0; i < want.length; i++) {
                want[i] = expected[i];
            }
            assertArrayEquals(want, master, layout + ": " + w.name() + " master weights at the wrong global places");
        }
    }

    @Test
    void stridedStateSavedAtTp2ReloadsAtTp1AndTp4() {
        OptimizerConfig distributed = OptimizerConfig.builder().useDistributedOptimizer(true).bucketSizeBytes(100).build();
        OptimizerConfig plain = distributed.toBuilder().useDistributedOptimizer(false).bucketSizeBytes(40_000_000L).build();

        // TP2 x DP2 with small buckets: the distributed optimizer's shards cut the strided weights mid-row
        InMemoryCheckpoint tp2 = new InMemoryCheckpoint();
        run(4, 2, distributed, null, tp2);
        assertGlobalValues(tp2, "saved at TP2 DP2 (distributed optimizer)");
        InMemoryCheckpoint plainTp2 = new InMemoryCheckpoint();
        run(2, 2, plain, null, plainTp2);
        assertGlobalValues(plainTp2, "saved at TP2");

        // each reload starts from zero weights: every value in its checkpoint comes from the TP2 state
        InMemoryCheckpoint tp1 = new InMemoryCheckpoint();
        run(1, 1, plain, tp2, tp1);
        assertGlobalValues(tp1, "TP2 DP2 -> TP1");
        InMemoryCheckpoint tp4 = new InMemoryCheckpoint();
        run(4, 4, plain, tp2, tp4);
        assertGlobalValues(tp4, "TP2 DP2 -> TP4");
        InMemoryCheckpoint dp4 = new InMemoryCheckpoint();
        run(4, 1, distributed, plainTp2, dp4);
        assertGlobalValues(dp4, "TP2 -> TP1 DP4 (distributed optimizer)");
        InMemoryCheckpoint tp2Again = new InMemoryCheckpoint();
        run(4, 2, distributed.toBuilder().bucketSizeBytes(60).build(), tp4, tp2Again);
        assertGlobalValues(tp2Again, "TP4 -> TP2 DP2 (distributed optimizer, other buckets)");
    }
}
