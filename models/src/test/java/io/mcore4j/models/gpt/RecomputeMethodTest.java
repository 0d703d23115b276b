package io.mcore4j.models.gpt;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.models.MoeLayerPattern;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.TransformerConfig.RecomputeMethod;
import io.mcore4j.models.TransformerConfig.RecomputeModule;
import io.mcore4j.models.transformer.LayerSpec;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.models.transformer.RecomputeSegment;
import io.mcore4j.models.transformer.TransformerLayer;
import io.mcore4j.moe.MoeConfig;
import io.mcore4j.optimizer.OptimizerConfig;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.stream.IntStream;

import org.junit.jupiter.api.Test;

/**
 * Megatron's {@code --recompute-method uniform|block} with {@code --recompute-num-layers}, and
 * selective recompute of {@code --recompute-modules}: with dropout on, a training pass computes the
 * same loss (bitwise: the first run is the same computation) and the same gradients as without
 * recompute, at TP1 and TP2, for dense and mixture-of-experts layers and through a two-stage
 * pipeline; the runs are cut as Megatron-Core cuts them.
 */
class RecomputeMethodTest {
    private static final int SEQ = 8;
    private static final int BATCH = 2;
    private static final int LAYERS = 4;

    private static TransformerConfig.Builder base() {
        return TransformerConfig.builder(LAYERS, 32, 4, 64).maxSequenceLength(SEQ).dropout(0.1, 0.1);
    }

    @Test
    void segmentsFollowMegatronCore() {
        assertEquals(List.of(new RecomputeSegment(0, 2, true), new RecomputeSegment(2, 4, true),
                new RecomputeSegment(4, 5, true)), RecomputeSegment.of(base().recomputeFull(RecomputeMethod.UNIFORM, 2).build(), 5),
                "uniform 2 over 5 layers: groups of 2, the last shorter");
        assertEquals(List.of(new RecomputeSegment(0, 1, true), new RecomputeSegment(1, 2, true),
                new RecomputeSegment(2, 3, false), new RecomputeSegment(3, 4, false)),
                RecomputeSegment.of(base().recomputeFull(RecomputeMethod.BLOCK, 2).build(), 4),
                "block 2 over 4 layers: the first two recomputed one by one");
        assertEquals(RecomputeSegment.plain(4), RecomputeSegment.of(base().recompute(TransformerConfig.Recompute.SELECTIVE).build(), 4));
        assertEquals(RecomputeSegment.of(base().recompute(TransformerConfig.Recompute.FULL).build(), 3),
                RecomputeSegment.of(base().recomputeFull(RecomputeMethod.UNIFORM, 1).build(), 3),
                "recompute(FULL) is uniform with one layer per group");
    }

    @Test
    void configRefusesWhatMegatronRefuses() {
        String noMethod = assertThrows(IllegalArgumentException.class,
                () -> base().recomputeFull(null, 1).build()).getMessage();
        assertTrue(noMethod.contains("recompute method"), noMethod);
        String zero = assertThrows(IllegalArgumentException.class,
                () -> base().recomputeFull(RecomputeMethod.BLOCK, 0).build()).getMessage();
        assertTrue(zero.contains("recompute num layers 0"), zero);
        String tooMany = assertThrows(IllegalArgumentException.class, () -> base()
                .recomputeFull(RecomputeMethod.UNIFORM, 3).build().validate(ParallelDims.builder(2).pipelineParallel(2).build(), 0))
                .getMessage();
        assertTrue(tooMany.contains("recompute num layers 3 must be between 1 and the 2 layers"), tooMany);
        String unknown = assertThrows(IllegalArgumentException.class, () -> RecomputeModule.ofMegatronName("layernorm")).getMessage();
        assertTrue(unknown.contains("layernorm") && unknown.contains("not implemented"), unknown);
        assertEquals(RecomputeModule.MOE, RecomputeModule.ofMegatronName("moe"));
    }

    @Test
    void methodsAndModulesGiveTheGradientsOfNoRecompute() {
        for (int tp : new int[] {1, 2}) {
            Result none = run(base().build(), tp);
            for (TransformerConfig c : List.of(
                    base().recomputeFull(RecomputeMethod.UNIFORM, 1).build(),
                    base().recomputeFull(RecomputeMethod.UNIFORM, 3).build(),
                    base().recomputeFull(RecomputeMethod.UNIFORM, 4).build(),
                    base().recomputeFull(RecomputeMethod.BLOCK, 1).build(),
                    base().recomputeFull(RecomputeMethod.BLOCK, 3).build(),
                    base().recomputeSelective(Set.of(RecomputeModule.MLP)).build(),
                    base().recomputeSelective(Set.of(RecomputeModule.CORE_ATTN, RecomputeModule.MLP)).build())) {
                assertSame(none, run(c, tp), describe(c) + " at TP" + tp);
            }
        }
    }

    @Test
    void mixtureOfExpertsLayersToo() {
        TransformerConfig.Builder moe = base().moe(TransformerConfig.MoeSettings.of(4, 2, MoeLayerPattern.every(2), 48, 0.01,
                MoeConfig.Dispatcher.ALL_GATHER));
        Result none = run(moe.build(), 1);
        for (TransformerConfig c : List.of(
                moe.recomputeSelective(Set.of(RecomputeModule.MOE, RecomputeModule.MLP)).build(),
                moe.recomputeFull(RecomputeMethod.UNIFORM, 2).build())) {
            assertSame(none, run(c, 1), describe(c) + " with MoE layers");
        }
    }

    /** One recorded Recompute per checkpointed run: uniform groups of layers. */
    @Test
    void forwardRecordsOneRecomputePerUniformGroup() {
        int u1 = recordedAfterForward(base().recomputeFull(RecomputeMethod.UNIFORM, 1).build());
        int u2 = recordedAfterForward(base().recomputeFull(RecomputeMethod.UNIFORM, 2).build());
        int u4 = recordedAfterForward(base().recomputeFull(RecomputeMethod.UNIFORM, 4).build());
        assertEquals(2, u1 - u2, "4 runs of one layer against 2 of two");
        assertEquals(1, u2 - u4, "2 runs of two layers against 1 of four");
    }

    /**
     * Block recomputes the chunk's first layers only: the others keep their activations and, as
     * without recompute, report their gradients complete as backward leaves them (a checkpointed
     * layer's are complete only when backward ends); so do the final norm and output layer after a
     * plain layer.
     */
    @Test
    void blockLeavesTheLaterLayersPlain() {
        assertEquals(List.of("layer 1", "layer 2", "layer 3", "head"),
                reportedDuringBackward(base().recomputeFull(RecomputeMethod.BLOCK, 1).build()));
        assertEquals(List.of("layer 3", "head"), reportedDuringBackward(base().recomputeFull(RecomputeMethod.BLOCK, 3).build()));
        assertEquals(List.of(), reportedDuringBackward(base().recomputeFull(RecomputeMethod.BLOCK, 4).build()));
        assertEquals(List.of(), reportedDuringBackward(base().recomputeFull(RecomputeMethod.UNIFORM, 1).build()));
        assertEquals(List.of("layer 0", "layer 1", "layer 2", "layer 3", "head"), reportedDuringBackward(base().build()));
    }

    /**
     * Two pipeline stages (in-JVM ranks), two steps through the schedule and Adam: the losses equal, the
     * final parameters and optimizer state within 1e-5 (Adam divides by the root of the second moment,
     * so a rounding difference in a near-zero gradient moves a parameter by up to 1e-6; a step is 2e-3).
     */
    @Test
    void pipelineStagesRecomputeTheirOwnLayers() {
        OptimizerConfig adam = OptimizerConfig.builder().lr(2e-3).clipGrad(1.0).build();
        TransformerConfig.Builder pipelined = base().maxSequenceLength(GptTraining.SEQ);
        GptTraining.Outcome none = GptTraining.train(pipelined.build(), adam, 1, 2, 0, 2, null, null);
        for (TransformerConfig c : List.of(pipelined.recomputeFull(RecomputeMethod.UNIFORM, 2).build(),
                pipelined.recomputeFull(RecomputeMethod.BLOCK, 1).build(),
                pipelined.recomputeSelective(Set.of(RecomputeModule.CORE_ATTN, RecomputeModule.MLP)).build())) {
            GptTraining.Outcome r = GptTraining.train(c, adam, 1, 2, 0, 2, null, null);
            assertEquals(none.losses(), r.losses(), describe(c) + " losses at PP2");
            assertEquals(none.state().keySet(), r.state().keySet());
            for (Map.Entry<String, byte[]> e : none.state().entrySet()) {
                float[] a = floats(e.getValue());
                float[] b = floats(r.state().get(e.getKey()));
                for (int i = 0; i < a.length; i++) {
                    assertEquals(a[i], b[i], 1e-5f, e.getKey() + "[" + i + "] after two steps with " + describe(c) + " at PP2");
                }
            }
        }
    }

    private static float[] floats(byte[] bytes) {
        float[] out = new float[bytes.length / 4];
        ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer().get(out);
        return out;
    }

    private static void assertSame(Result expected, Result actual, String what) {
        assertEquals(expected.loss, actual.loss, 0, "loss with " + what);
        assertEquals(expected.gradients.keySet(), actual.gradients.keySet());
        double largest = 0;
        for (Map.Entry<String, double[]> e : expected.gradients.entrySet()) {
            double[] a = e.getValue();
            double[] b = actual.gradients.get(e.getKey());
            for (int i = 0; i < a.length; i++) {
                assertEquals(a[i], b[i], 1e-6, e.getKey() + "[" + i + "] with " + what);
                largest = Math.max(largest, Math.abs(a[i]));
            }
        }
        assertTrue(largest > 1e-3, "gradients vanished with " + what);
    }

    private static String describe(TransformerConfig c) {
        return switch (c.recompute()) {
            case FULL -> "full " + c.recomputeMethod().megatronName() + " " + c.recomputeNumLayers();
            case SELECTIVE -> "selective " + c.recomputeModules();
            case NONE -> "no recompute";
        };
    }

    /** Rank 0's loss and local gradients by key. */
    private record Result(double loss, Map<String, double[]> gradients) {}

    private static GptModel build(TransformerConfig config, ProcessGroups groups, NDManager m) {
        return GptModel.build(ModelContext.create(config, groups, m, new SeedScheme(42)), LayerSpec.tensorParallel(),
                IntStream.range(0, config.numLayers()).toArray(), true, true);
    }

    private static Result run(TransformerConfig config, int tp) {
        return InJvmWorld.run(tp, rank -> {
            NDManager m = rank.manager();
            GptModel model = build(config, rank.groups(ParallelDims.of(tp, tp, 1)), m);
            double loss;
            try (AutogradScope scope = AutogradScope.open(m)) {
                NDArray[] data = TokenBatches.shifted(scope.manager(), config.vocabSize(), SEQ, BATCH, 7, 3);
                NDArray l = model.forward(scope, data[0], null, data[1]);
                loss = l.toType(DataType.FLOAT64, false).getDouble();
                scope.backward(l);
            }
            Map<String, double[]> gradients = new LinkedHashMap<>();
            for (Map.Entry<String, Parameter> e : model.namedParameters("").entrySet()) {
                NDArray g = Tensors.gradientOrZeros(e.getValue().data(), m);
                gradients.put(e.getKey(), g.toType(DataType.FLOAT64, false).toDoubleArray());
                g.close();
            }
            return new Result(loss, gradients);
        }).get(0);
    }

    /** What the model's gradient listeners hear during one backward, in order: "layer n" or "head". */
    private static List<String> reportedDuringBackward(TransformerConfig config) {
        return InJvmWorld.run(1, rank -> {
            NDManager m = rank.manager();
            GptModel model = build(config, rank.groups(ParallelDims.of(1, 1, 1)), m);
            List<String> heard = new ArrayList<>();
            model.addGradientReadyListener(completed -> {
                String name = "head";
                for (TransformerLayer layer : model.layers()) {
                    if (layer.parameters().contains(completed.get(0))) {
                        name = "layer " + layer.layerNumber();
                    }
                }
                heard.add(name);
            });
            try (AutogradScope scope = AutogradScope.open(m)) {
                NDArray[] data = TokenBatches.shifted(scope.manager(), config.vocabSize(), SEQ, BATCH, 7, 3);
                scope.backward(model.forward(scope, data[0], null, data[1]));
            }
            Collections.reverse(heard);
            return heard;
        }).get(0);
    }

    private static int recordedAfterForward(TransformerConfig config) {
        return InJvmWorld.run(1, rank -> {
            NDManager m = rank.manager();
            GptModel model = build(config, rank.groups(ParallelDims.of(1, 1, 1)), m);
            try (AutogradScope scope = AutogradScope.open(m)) {
                NDArray[] data = TokenBatches.shifted(scope.manager(), config.vocabSize(), SEQ, BATCH, 7, 3);
                model.forward(scope, data[0], null, data[1]);
                return scope.recordedFunctions();
            }
        }).get(0);
    }
}
