package io.mcore4j.checkpoint;

import static org.junit.jupiter.api.Assertions.assertEquals;

import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Acceptance 2: a small GPT-like stack with optimizer state, saved at TP2 x PP2 x DP2 and loaded at
 * TP4 x PP1 x DP1 and at TP1 x PP2 (virtual 2) x DP4, comes back bit for bit, and the common state
 * round-trips.
 *
 * <p>Per layer: a column-parallel fc1 [16, 8] (split along dim 0 over TP), a row-parallel fc2
 * [8, 16] (dim 1 over TP) and a norm weight [8] replicated over TP; each has Adam-like
 * {@code exp_avg} / {@code exp_avg_sq} keys sharded the same way. Also: a float16 vocab-parallel
 * embedding on the first stage, an expert stack [4, 8, 4] split along dim 0 over DP (experts as
 * an expert-parallel axis), and an int64 step counter held by every rank. Non-main replicas: every
 * DP rank but 0, TP ranks but 0 for the norm, and all ranks but 0 for the counter.
 */
class ModelStateTest {
    static final int LAYERS = 4;
    static final long[] FC1 = {16, 8};
    static final long[] FC2 = {8, 16};
    static final long[] NORM = {8};
    static final long[] EMBEDDING = {32, 8};
    static final long[] EXPERTS = {4, 8, 4};

    @TempDir
    Path dir;

    /** Where a rank sits in a layout, and which layers it holds. */
    record Place(int tp, int tpSize, int pp, int dp, int dpSize, int worldRank, List<Integer> layers) {
        static Place of(ProcessGroups g) {
            ParallelDims d = g.dims();
            List<Integer> layers = new ArrayList<>();
            int chunks = d.pipelineParallel() * d.virtualPipelineParallel();
            int perChunk = LAYERS / chunks;
            // interleaved: model chunk c of stage s holds layers [(c * pp + s) * perChunk, ...)
            for (int c = 0; c < d.virtualPipelineParallel(); c++) {
                int first = (c * d.pipelineParallel() + g.pipelineRank()) * perChunk;
                for (int l = first; l < first + perChunk; l++) {
                    layers.add(l);
                }
            }
            return new Place(g.tensorParallelRank(), d.tensorParallel(), g.pipelineRank(), g.dataParallelRank(),
                    d.dataParallel(), g.worldRank(), layers);
        }
    }

    /** Builds this rank's tensors: real values when {@code targets} is false, 1234.5-filled targets otherwise. */
    static List<ShardedTensor> state(NDManager m, Place p, boolean targets) {
        List<ShardedTensor> out = new ArrayList<>();
        for (int layer : p.layers()) {
            String prefix = "decoder.layers." + layer + ".";
            for (String param : List.of("mlp.fc1.weight", "mlp.fc2.weight", "norm.weight")) {
                long[] global = param.contains("fc1") ? FC1 : param.contains("fc2") ? FC2 : NORM;
                long[] offset = new long[global.length];
                long[] local = global.clone();
                int replica = p.dp();
                if (param.contains("fc1")) {
                    local[0] = global[0] / p.tpSize();
                    offset[0] = local[0] * p.tp();
                } else if (param.contains("fc2")) {
                    local[1] = global[1] / p.tpSize();
                    offset[1] = local[1] * p.tp();
                } else {
                    replica = p.tp() + p.tpSize() * p.dp();
                }
                for (String kind : List.of("", "optimizer.exp_avg.", "optimizer.exp_avg_sq.")) {
                    out.add(make(m, kind + prefix + param, global, offset, local, replica, DataType.FLOAT32, targets));
                }
            }
        }
        if (p.pp() == 0) {
            long rows = EMBEDDING[0] / p.tpSize();
            out.add(make(m, "embedding.word_embeddings.weight", EMBEDDING, new long[] {rows * p.tp(), 0},
                    new long[] {rows, EMBEDDING[1]}, p.dp(), DataType.FLOAT16, targets));
        }
        if (p.pp() == 0 && p.tp() == 0) {
            long experts = EXPERTS[0] / p.dpSize();
            out.add(make(m, "decoder.experts.fc1.weight", EXPERTS, new long[] {experts * p.dp(), 0, 0},
                    new long[] {experts, EXPERTS[1], EXPERTS[2]}, 0, DataType.FLOAT32, targets));
        }
        out.add(make(m, "optimizer.step", new long[0], new long[0], new long[0], p.worldRank(), DataType.INT64, targets));
        return out;
    }

    private static ShardedTensor make(NDManager m, String key, long[] global, long[] offset, long[] local, int replica,
                                      DataType dtype, boolean target) {
        return target ? Blocks.target(m, key, global, offset, local, dtype)
                : Blocks.shard(m, key, global, offset, local, replica, dtype);
    }

    static Map<String, Object> common() {
        Map<String, Object> c = new LinkedHashMap<>();
        c.put("iteration", 1234L);
        c.put("rng", Map.of("seed", 42L, "generators", List.of(7L, -3L, Long.MAX_VALUE)));
        c.put("loss_scale", 65536.0);
        c.put("scheduler", Map.of("lr", 3.0e-4, "warmup_steps", 100, "decay", "cosine"));
        c.put("data", Map.of("consumed_samples", 4096L, "epoch", 0L));
        c.put("skipped", true);
        c.put("note", null);
        c.put("text", "quote \" backslash \\ newline \n tab \t e\u0301 \u2603 \ud83d\ude00 control \u0001 /");
        return c;
    }

    @Test
    void stackLoadsBitwiseAtTwoOtherLayoutsAndCommonStateRoundTrips() {
        InJvmWorld.run(8, rank -> {
            ProcessGroups g = rank.groups(ParallelDims.of(8, 2, 2));
            DistCheckpointing.save(dir, state(rank.manager(), Place.of(g), false), common(), g.world());
            return null;
        });
        Map<String, Object> expectedCommon = new LinkedHashMap<>(common());
        expectedCommon.put("scheduler", Map.of("lr", 3.0e-4, "warmup_steps", 100L, "decay", "cosine"));

        InJvmWorld.run(4, rank -> {
            ProcessGroups g = rank.groups(ParallelDims.of(4, 4, 1));
            List<ShardedTensor> targets = state(rank.manager(), Place.of(g), true);
            LoadResult result = DistCheckpointing.load(dir, targets, g.world(), StrictMode.RAISE_ALL);
            targets.forEach(Blocks::assertHoldsOriginal);
            assertEquals(expectedCommon, result.common());
            return null;
        });
        InJvmWorld.run(8, rank -> {
            ProcessGroups g = rank.groups(ParallelDims.builder(8).tensorParallel(1).pipelineParallel(2)
                    .virtualPipelineParallel(2).build());
            List<ShardedTensor> targets = state(rank.manager(), Place.of(g), true);
            LoadResult result = DistCheckpointing.load(dir, targets, g.world(), StrictMode.RAISE_ALL);
            targets.forEach(Blocks::assertHoldsOriginal);
            assertEquals(List.of(), result.missingKeys());
            assertEquals(List.of(), result.unexpectedKeys());
            return null;
        });
        assertEquals(expectedCommon, DistCheckpointing.loadCommon(dir));
    }
}
