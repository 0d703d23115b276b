package io.mcore4j.moe;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import io.mcore4j.tensorparallel.MlpActivation;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * The checkpoint description: keys by global expert index, main replicas that tile every global
 * tensor exactly once, and values that assemble into the weights of the single-rank layer (so every
 * layout initialises the same global weights and checkpoints reshard across EP and expert-TP).
 */
class ShardedStateTest {
    static final String PREFIX = "decoder.layers.2.mlp.";

    /** A piece copied to the heap. */
    record Piece(String key, long[] global, long[] offset, long[] local, int replica, float[] values) {}

    @ParameterizedTest(name = "world {0}: TP{1} EP{2} expert-TP{3}")
    @CsvSource({"4, 2, 2, 2", "4, 1, 4, 1", "4, 2, 2, 1", "2, 1, 1, 2"})
    void piecesTileTheSingleRankWeights(int world, int tp, int ep, int etp) {
        MoeConfig config = MoeConfig.builder(4, 2, 8).activation(MlpActivation.SWIGLU).addBias(true)
                .sharedExpertFfnHiddenSize(8).routerScore(MoeConfig.RouterScore.SIGMOID).auxLossFree(true).build();
        List<Piece> reference = describe(1, ParallelDims.builder(1).build(), config).get(0);
        Map<String, float[]> expected = new TreeMap<>();
        Map<String, long[]> shapes = new TreeMap<>();
        for (Piece p : reference) {
            // on one rank a SwiGLU fc1 still comes in two pieces (gate, up), like a strided column-parallel linear
            shapes.put(p.key(), p.global());
            float[] full = expected.computeIfAbsent(p.key(), k -> new float[(int) volume(p.global())]);
            place(p, full, new int[full.length]);
        }
        for (int e = 0; e < 4; e++) {
            for (String w : List.of("linear_fc1.weight", "linear_fc2.weight", "linear_fc1.bias", "linear_fc2.bias")) {
                assertTrue(expected.containsKey(PREFIX + "experts.local_experts." + e + "." + w), "key of expert " + e);
            }
        }
        assertTrue(expected.containsKey(PREFIX + "router.weight"));
        assertTrue(expected.containsKey(PREFIX + "router.expert_bias"));
        assertTrue(expected.containsKey(PREFIX + "shared_experts.linear_fc1.weight"));

        ParallelDims dims = ParallelDims.builder(world).tensorParallel(tp).expertParallel(ep).expertTensorParallel(etp)
                .build();
        Map<String, float[]> assembled = new TreeMap<>();
        Map<String, int[]> coverage = new TreeMap<>();
        for (List<Piece> rank : describe(world, dims, config)) {
            for (Piece p : rank) {
                long[] global = shapes.get(p.key());
                assertTrue(global != null, "unexpected key " + p.key());
                assertArrayEquals(global, p.global(), "global shape of " + p.key());
                if (p.replica() != 0) {
                    continue;
                }
                float[] full = assembled.computeIfAbsent(p.key(), k -> new float[(int) volume(global)]);
                int[] covered = coverage.computeIfAbsent(p.key(), k -> new int[(int) volume(global)]);
                place(p, full, covered);
            }
        }
        assertEquals(expected.keySet(), assembled.keySet(), "keys with a main replica");
        for (String key : expected.keySet()) {
            for (int i = 0; i < coverage.get(key).length; i++) {
                assertEquals(1, coverage.get(key)[i], key + " element " + i + " main replicas");
            }
            assertArrayEquals(expected.get(key), assembled.get(key), 0f, key + " values");
        }
    }

    /**
     * Each parameter's own partition (which the optimizer uses to place its state) puts the rank's
     * rows where the layer's checkpoint pieces say they are: for SwiGLU's fused fc1 under expert-TP
     * that takes the stride.
     */
    @ParameterizedTest(name = "world {0}: TP{1} EP{2} expert-TP{3}")
    @CsvSource({"4, 2, 2, 2", "2, 1, 1, 2"})
    void parameterPartitionsPlaceRowsWhereThePiecesAre(int world, int tp, int ep, int etp) {
        MoeConfig config = MoeConfig.builder(4, 2, 8).activation(MlpActivation.SWIGLU).addBias(true).build();
        ParallelDims dims = ParallelDims.builder(world).tensorParallel(tp).expertParallel(ep).expertTensorParallel(etp)
                .build();
        InJvmWorld.run(world, ctx -> {
            ProcessGroups groups = ctx.groups(dims);
            try (NDManager m = ctx.manager().newSubManager();
                 MoeLayer layer = MoeLayer.build(config, 8, groups, m, new SeedScheme(21), PREFIX, new AuxLossScale())) {
                Map<String, List<Long>> pieceStarts = new TreeMap<>();
                Map<String, Parameter> named = layer.namedParameters(PREFIX);
                for (ShardedTensor t : layer.shardedState(PREFIX)) {
                    Parameter p = named.get(t.key());
                    if (p != null && p.partition().count() > 1) {
                        pieceStarts.computeIfAbsent(t.key(), k -> new ArrayList<>()).add(t.globalOffset()[p.partition().dim()]);
                    }
                }
                assertFalse(pieceStarts.isEmpty(), "some expert weights are split");
                for (Map.Entry<String, List<Long>> e : pieceStarts.entrySet()) {
                    Parameter.Partition partition = named.get(e.getKey()).partition();
                    long local = named.get(e.getKey()).data().getShape().get(partition.dim());
                    List<Long> runStarts = new ArrayList<>();
                    for (Parameter.Run run : partition.runs(local)) {
                        runStarts.add(run.globalStart());
                    }
                    List<Long> expected = new ArrayList<>(e.getValue());
                    java.util.Collections.sort(expected);
                    assertEquals(expected, runStarts, e.getKey());
                }
            }
            return null;
        });
    }

    private static List<List<Piece>> describe(int world, ParallelDims dims, MoeConfig config) {
        return InJvmWorld.run(world, ctx -> {
            ProcessGroups groups = ctx.groups(dims);
            try (NDManager m = ctx.manager().newSubManager();
                 MoeLayer layer = MoeLayer.build(config, 8, groups, m, new SeedScheme(21), PREFIX, new AuxLossScale())) {
                List<Piece> out = new ArrayList<>();
                for (ShardedTensor t : layer.shardedState(PREFIX)) {
                    out.add(new Piece(t.key(), t.globalShape(), t.globalOffset(), t.data().getShape().getShape().clone(),
                            t.replicaId(), t.data().toType(DataType.FLOAT32, true).toFloatArray()));
                }
                return out;
            }
        });
    }

    /** Copies a piece into the row-major full array and counts coverage. */
    private static void place(Piece p, float[] full, int[] covered) {
        long[] g = p.global();
        long[] l = p.local();
        long n = volume(l);
        for (int i = 0; i < n; i++) {
            long rem = i;
            long flat = 0;
            long stride = 1;
            long[] idx = new long[l.length];
            for (int d = l.length - 1; d >= 0; d--) {
                idx[d] = rem % l[d];
                rem /= l[d];
            }
            for (int d = l.length - 1; d >= 0; d--) {
                flat += (idx[d] + p.offset()[d]) * stride;
                stride *= g[d];
            }
            full[(int) flat] = p.values()[i];
            covered[(int) flat]++;
        }
    }

    private static long volume(long[] shape) {
        long v = 1;
        for (long s : shape) {
            v *= s;
        }
        return v;
    }

    @Test
    void layoutErrorsNameTheValues() {
        InJvmWorld.run(4, ctx -> {
            ProcessGroups ep4 = ctx.groups(ParallelDims.builder(4).expertParallel(4).build());
            ProcessGroups etp4 = ctx.groups(ParallelDims.builder(4).expertTensorParallel(4).build());
            try (NDManager m = ctx.manager().newSubManager()) {
                IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> MoeLayer.build(
                        MoeConfig.builder(6, 2, 8).build(), 8, ep4, m, new SeedScheme(1), "", new AuxLossScale()));
                assertEquals("6 experts are not divisible by expert parallel size 4", e.getMessage());
                e = assertThrows(IllegalArgumentException.class, () -> MoeLayer.build(
                        MoeConfig.builder(4, 2, 6).build(), 8, etp4, m, new SeedScheme(1), "", new AuxLossScale()));
                assertEquals("expert ffn hidden size 6 is not divisible by expert tensor parallel size 4", e.getMessage());
            }
            return null;
        });
    }
}
