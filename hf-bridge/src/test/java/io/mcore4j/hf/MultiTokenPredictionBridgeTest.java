package io.mcore4j.hf;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.gpt.GptModel;
import io.mcore4j.models.transformer.LayerSpec;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import org.junit.jupiter.api.Test;

/**
 * DeepSeek-V3's multi-token prediction layers ({@code model.layers.<num_hidden_layers + k>.enorm}, {@code hnorm},
 * {@code eh_proj}, {@code shared_head.norm}, the layer's attention, norms and experts) as mcore4j's depths: a model of the
 * {@code deepseek_v3} fixture's config with one depth, exported at TP2 and imported at TP2 into a model initialised
 * from another seed, holds the same tensors; the export's {@code config.json} says {@code num_nextn_predict_layers} 1;
 * transformers' own save (the fixture) has no such layers, which the import names.
 */
class MultiTokenPredictionBridgeTest {
    private static final Path OUT = Path.of("target", "hf-export", "deepseek_v3-mtp");

    @Test
    void depthsRoundTripAtTp2() {
        ParallelDims dims = ParallelDims.of(2, 2, 1);
        TransformerConfig c;
        try (HfCheckpoint ck = HfCheckpoint.open(Fixtures.dir("deepseek_v3"))) {
            c = ck.config().transformerConfig(Fixtures.VOCAB_DIVISOR, 2, DataType.FLOAT32).toBuilder()
                    .mtp(new TransformerConfig.MtpSettings(1, 0.1)).build();
        }
        HfConfig exported = HfConfig.forModel(c, c.vocabSize());
        List<Map<String, float[]>> before = InJvmWorld.run(2, rank -> {
            ProcessGroups groups = rank.groups(dims);
            GptModel model = build(c, groups, rank.manager(), 3);
            HfExport.write(OUT, exported, List.of(model), groups.world(), HfDtype.F32);
            return values(model);
        });
        try (HfCheckpoint ck = HfCheckpoint.open(OUT)) {
            assertEquals(1, ck.config().multiTokenPredictionLayers());
            int n = c.numLayers();
            for (String name : List.of("enorm.weight", "hnorm.weight", "eh_proj.weight", "shared_head.norm.weight",
                    "self_attn.kv_a_proj_with_mqa.weight", "mlp.gate.weight", "mlp.experts.0.down_proj.weight")) {
                assertTrue(ck.tensorNames().contains("model.layers." + n + "." + name), name + " in " + ck.tensorNames());
            }
        }
        List<Map<String, float[]>> after = InJvmWorld.run(2, rank -> {
            ProcessGroups groups = rank.groups(dims);
            GptModel model = build(c, groups, rank.manager(), 4);
            try (HfCheckpoint ck = HfCheckpoint.open(OUT)) {
                ck.loadInto(List.of(model));
            }
            return values(model);
        });
        for (int r = 0; r < 2; r++) {
            assertEquals(before.get(r).keySet(), after.get(r).keySet());
            int depth = 0;
            for (String key : before.get(r).keySet()) {
                assertArrayEquals(before.get(r).get(key), after.get(r).get(key), key);
                depth += key.startsWith("mtp.layers.0.") ? 1 : 0;
            }
            assertTrue(depth >= 10, "depth tensors compared on rank " + r + ": " + depth);
        }
    }

    @Test
    void transformersSaveHasNoDepths() {
        Throwable e = assertThrows(InJvmWorld.RankFailedException.class, () -> InJvmWorld.run(1, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.of(1, 1, 1));
            try (HfCheckpoint ck = HfCheckpoint.open(Fixtures.dir("deepseek_v3"))) {
                TransformerConfig c = ck.config().transformerConfig(Fixtures.VOCAB_DIVISOR, 1, DataType.FLOAT32)
                        .toBuilder().mtp(new TransformerConfig.MtpSettings(1, 0.1)).build();
                ck.loadInto(List.of(build(c, groups, rank.manager(), 3)));
            }
            return null;
        })).getCause();
        assertTrue(e instanceof HfCheckpointException, String.valueOf(e));
        assertTrue(e.getMessage().contains("enorm.weight\" that model tensor \"mtp.layers.0.enorm.weight\" needs is in no"
                + " file"), e.getMessage());
    }

    private static GptModel build(TransformerConfig c, ProcessGroups groups, NDManager m, long seed) {
        int[] layers = new int[c.numLayers()];
        for (int i = 0; i < layers.length; i++) {
            layers[i] = i;
        }
        return GptModel.build(ModelContext.create(c, groups, m, new SeedScheme(seed)), LayerSpec.tensorParallel(), layers,
                true, true);
    }

    private static Map<String, float[]> values(GptModel model) {
        Map<String, float[]> out = new TreeMap<>();
        for (ShardedTensor t : model.shardedState("")) {
            out.put(t.key() + java.util.Arrays.toString(t.globalOffset()), t.data().toFloatArray());
        }
        return out;
    }
}
