package io.mcore4j.models.gpt;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.contextparallel.ContextParallelSplit;
import io.mcore4j.contextparallel.CpCommType;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.transformer.AttentionBackend;
import io.mcore4j.models.transformer.LayerSpec;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.models.transformer.SdpaAttention;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.ReduceOp;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.Test;

/**
 * One forward and backward of a whole GPT with the sequence split over a context-parallel group
 * (alone and with TP2, with and without sequence parallelism), against the serial model with the
 * same seeds: the loss averaged over the group and every gradient averaged over it (as the
 * {@code dp-cp} gradient reduction does) must equal the serial ones, for every
 * {@code --cp-comm-type} (p2p, allgather, a2a), with GQA and RoPE and with learned positions, with and without a loss mask
 * (and a sliding window under a2a);
 * and the fused attention under CP ({@code p2p}: a ring on libtorch's flash kernels; {@code a2a}) against it;
 * and hierarchical {@code a2a+p2p} composed and fused at CP4 as 2 x 2 (alone, and with TP2 and SP), and as 1 x 4 and
 * 4 x 1, which are {@code p2p} and {@code a2a}.
 */
class ContextParallelGptTest {
    /** The comm types over the whole context-parallel group ({@code a2a+p2p} has its own test: it needs levels). */
    private static final List<CpCommType> FLAT = List.of(CpCommType.P2P, CpCommType.ALL_GATHER, CpCommType.A2A);
    private static final int SEQ = 16;
    private static final int BATCH = 2;
    private static final double TOLERANCE = 1e-5;

    private static TransformerConfig.Builder base() {
        return TransformerConfig.builder(2, 32, 4, 64).maxSequenceLength(SEQ).dropout(0, 0);
    }

    private static TransformerConfig.Builder gqaRope() {
        return base().queryGroups(2).positionEmbedding(TransformerConfig.PositionEmbedding.ROPE);
    }

    @Test
    void contextParallelAloneMatchesSerial() {
        for (boolean masked : new boolean[] {false, true}) {
            TransformerConfig gqa = gqaRope().build();
            Result serial = run(gqa, 1, 1, masked);
            for (CpCommType type : FLAT) {
                for (int cp : new int[] {2, 4}) {
                    TransformerConfig c = gqaRope().cpCommType(type).build();
                    assertMatches(serial, run(c, 1, cp, masked), "GQA+RoPE CP" + cp + " " + type + " mask=" + masked);
                }
            }
        }
        TransformerConfig learned = base().build();
        assertMatches(run(learned, 1, 1, true), run(base().cpCommType(CpCommType.ALL_GATHER).build(), 1, 4, true),
                "learned positions CP4 allgather");
    }

    @Test
    void contextParallelWithTensorAndSequenceParallelMatchesSerial() {
        Result serial = run(gqaRope().build(), 1, 1, true);
        for (CpCommType type : FLAT) {
            assertMatches(serial, run(gqaRope().cpCommType(type).build(), 2, 2, true), "TP2 CP2 " + type);
            assertMatches(serial, run(gqaRope().cpCommType(type).sequenceParallel(true).build(), 2, 2, true),
                    "TP2 SP CP2 " + type);
        }
        Result learned = run(base().build(), 1, 1, false);
        assertMatches(learned, run(base().sequenceParallel(true).build(), 2, 2, false), "learned positions TP2 SP CP2");
    }

    /**
     * The fused attention under CP (ring attention on libtorch's CPU flash kernels) against the serial composed
     * attention, with and without GQA; {@code auto} picks it for p2p.
     */
    @Test
    void fusedRingAttentionMatchesSerial() {
        LayerSpec fused = AttentionBackend.FUSED.layerSpec(gqaRope().build());
        for (TransformerConfig.Builder b : List.of(gqaRope(), base().positionEmbedding(TransformerConfig.PositionEmbedding.ROPE))) {
            Result serial = run(b.build(), 1, 1, true);
            for (int cp : new int[] {2, 4}) {
                assertMatches(serial, run(b.build(), 1, cp, true, fused), "fused CP" + cp + " groups " + b.build().numQueryGroups());
            }
        }
        Result serial = run(gqaRope().build(), 1, 1, false);
        assertMatches(serial, run(gqaRope().build(), 2, 2, false, AttentionBackend.AUTO.layerSpec(gqaRope().build())),
                "auto TP2 CP2 p2p");
        assertMatches(serial, run(gqaRope().recompute(TransformerConfig.Recompute.SELECTIVE).build(), 1, 2, false, fused),
                "fused CP2 selective recompute");
        for (int cp : new int[] {2, 4}) {
            assertMatches(serial, run(gqaRope().cpCommType(CpCommType.A2A).build(), 1, cp, false, fused), "fused CP" + cp + " a2a");
        }
        assertMatches(serial, run(gqaRope().cpCommType(CpCommType.A2A).build(), 2, 2, false, fused), "fused TP2 CP2 a2a");
    }

    /**
     * A sliding window of 3 tokens on layer 0 (layer 1 global) under {@code a2a}, which attends whole sequences:
     * composed and fused, the serial windowed model's loss and gradients.
     */
    @Test
    void slidingWindowUnderAllToAllMatchesSerial() {
        TransformerConfig windowed = gqaRope().cpCommType(CpCommType.A2A)
                .slidingWindow(new TransformerConfig.SlidingWindow(3, 2, List.of())).build();
        Result serial = run(windowed, 1, 1, false);
        assertMatches(serial, run(windowed, 1, 2, false), "composed CP2 a2a with a window");
        assertMatches(serial, run(windowed, 1, 2, false, AttentionBackend.FUSED.layerSpec(windowed)), "fused CP2 a2a with a window");
    }

    /**
     * {@code a2a+p2p} at CP4: an all-to-all over pairs of consecutive CP ranks, then the ring over the two
     * pairs, composed and on the fused kernels; with TP2 (one key/value group per TP rank, repeated for the
     * pair) composed. The degenerate levels 1 x 4 and 4 x 1 are {@code p2p} and {@code a2a}.
     */
    @Test
    void hierarchicalContextParallelismMatchesSerial() {
        Result serial = run(gqaRope().build(), 1, 1, true);
        LayerSpec fused = AttentionBackend.FUSED.layerSpec(gqaRope().build());
        assertMatches(serial, run(hierarchical(2, 2), 1, 4, true), "CP4 a2a+p2p 2x2");
        assertMatches(serial, run(hierarchical(2, 2), 1, 4, true, fused), "fused CP4 a2a+p2p 2x2");
        assertMatches(serial, run(hierarchical(1, 4), 1, 4, true, fused), "fused CP4 a2a+p2p 1x4");
        assertMatches(serial, run(hierarchical(4, 1), 1, 4, true), "CP4 a2a+p2p 4x1");
        TransformerConfig sequenceParallel = hierarchical(2, 2).toBuilder().sequenceParallel(true).build();
        assertMatches(serial, run(sequenceParallel, 2, 4, true), "TP2 SP CP4 a2a+p2p 2x2");
    }

    @Test
    void hierarchicalSizesAreCheckedAgainstTheLayout() {
        assertEquals("--cp-comm-type a2a+p2p needs two --hierarchical-context-parallel-sizes (the a2a group's size, then"
                + " the p2p ring's, multiplying to --context-parallel-size); got none",
                assertThrows(IllegalArgumentException.class, () -> gqaRope().cpCommType(CpCommType.A2A_P2P).build()).getMessage());
        TransformerConfig c = hierarchical(4, 1);
        assertEquals("--hierarchical-context-parallel-sizes 4 1 multiply to 4, not --context-parallel-size 2",
                assertThrows(IllegalArgumentException.class, () -> c.validateContextParallel(1, 2)).getMessage());
        assertEquals("--cp-comm-type a2a+p2p scatters the attention heads over the a2a group: 2 heads per tensor-parallel"
                + " rank (4 / --tensor-model-parallel-size 2) are not divisible by its size 4 (the first of"
                + " --hierarchical-context-parallel-sizes 4 1)",
                assertThrows(IllegalArgumentException.class, () -> c.validateContextParallel(2, 4)).getMessage());
        IllegalArgumentException noLevels = assertThrows(IllegalArgumentException.class,
                () -> c.validate(ParallelDims.builder(4).contextParallel(4).build()));
        assertEquals("--cp-comm-type a2a+p2p with --hierarchical-context-parallel-sizes 4 1 needs the layout's hierarchical"
                + " context-parallel groups of those sizes; the layout has [] (ParallelDims.Builder.hierarchicalContextParallelSizes)",
                noLevels.getMessage());
    }

    /**
     * A sliding window under {@code a2a+p2p}: refused where the ring has more than one rank (2 x 2), its masks
     * being causal between whole chunks, composed and fused; taken at 4 x 1, where the all-to-all gathers whole
     * sequences, with the serial windowed model's loss and gradients.
     */
    @Test
    void slidingWindowUnderHierarchicalContextParallelism() {
        TransformerConfig.SlidingWindow window = new TransformerConfig.SlidingWindow(3, 2, List.of());
        TransformerConfig ring = hierarchical(2, 2).toBuilder().slidingWindow(window).build();
        String expected = "sliding-window attention (window size 3) under context parallelism needs --cp-comm-type a2a"
                + " (or a2a+p2p with a ring of one rank), which attends whole sequences; context parallel size 4 with"
                + " --cp-comm-type a2a+p2p over a ring of 2 ranks is not supported";
        assertEquals(expected, assertThrows(InJvmWorld.RankFailedException.class,
                () -> run(ring, 1, 4, false)).getCause().getMessage());
        assertEquals(expected, assertThrows(InJvmWorld.RankFailedException.class,
                () -> run(ring, 1, 4, false, AttentionBackend.FUSED.layerSpec(ring))).getCause().getMessage());
        TransformerConfig noRing = hierarchical(4, 1).toBuilder().slidingWindow(window).build();
        assertMatches(run(gqaRope().slidingWindow(window).build(), 1, 1, false), run(noRing, 1, 4, false),
                "CP4 a2a+p2p 4x1 with a window");
    }

    private static TransformerConfig hierarchical(int a2a, int p2p) {
        return gqaRope().cpCommType(CpCommType.A2A_P2P).hierarchicalContextParallelSizes(List.of(a2a, p2p)).build();
    }

    @Test
    void selectiveRecomputeUnderContextParallelismMatchesSerial() {
        TransformerConfig c = gqaRope().recompute(TransformerConfig.Recompute.SELECTIVE).build();
        assertMatches(run(gqaRope().build(), 1, 1, false), run(c, 1, 2, false), "CP2 p2p selective recompute");
    }

    @Test
    void indivisibleSequenceLengthIsNamed() {
        ContextParallelSplit split = new ContextParallelSplit(4, 1);
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> split.checkSequenceLength(12));
        assertEquals("sequence length 12 is not divisible by 2 x context parallel size 4 = 8 (the load-balanced"
                + " causal split cuts the sequence into 2·CP equal chunks)", e.getMessage());
        // a model fed a local part of odd length refuses it with the same message, naming the whole length
        Throwable inModel = assertThrows(InJvmWorld.RankFailedException.class, () -> InJvmWorld.run(2, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.builder(2).contextParallel(2).build());
            GptModel model = GptModel.build(ModelContext.create(gqaRope().build(), groups, rank.manager(), new SeedScheme(1)),
                    LayerSpec.tensorParallel(), new int[] {0, 1}, true, true);
            try (AutogradScope scope = AutogradScope.open(rank.manager())) {
                NDArray[] data = TokenBatches.shifted(scope.manager(), 64, 3, BATCH, 7, 3);
                model.forward(scope, data[0], null, data[1]);
            }
            return null;
        })).getCause();
        assertTrue(inModel instanceof IllegalArgumentException && inModel.getMessage()
                .startsWith("sequence length 6 is not divisible by 2 x context parallel size 2 = 4"), inModel.toString());
        Throwable sdpa = assertThrows(InJvmWorld.RankFailedException.class, () -> InJvmWorld.run(2, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.builder(2).contextParallel(2).build());
            return new SdpaAttention(ModelContext.create(base().cpCommType(CpCommType.ALL_GATHER).build(), groups,
                    rank.manager(), new SeedScheme(1)));
        })).getCause();
        assertTrue(sdpa instanceof IllegalArgumentException && sdpa.getMessage().contains(
                "context parallel size 2 with --cp-comm-type allgather needs the composed attention"), sdpa.toString());
    }

    private static void assertMatches(Result expected, Result actual, String what) {
        assertEquals(expected.loss, actual.loss, TOLERANCE * Math.abs(expected.loss), "loss with " + what);
        int compared = 0;
        for (Map.Entry<String, double[]> e : actual.gradients.entrySet()) {
            double[] a = expected.gradients.get(e.getKey());
            double[] b = e.getValue();
            double scale = 0;
            for (double v : a) {
                scale = Math.max(scale, Math.abs(v));
            }
            for (int i = 0; i < a.length; i++) {
                assertEquals(a[i], b[i], TOLERANCE * Math.max(scale, 1e-3), e.getKey() + "[" + i + "] with " + what);
            }
            compared++;
        }
        assertTrue(compared >= 12, "compared only " + compared + " gradients with " + what);
    }

    private record Result(double loss, Map<String, double[]> gradients) {}

    /**
     * One forward/backward on {@code tp·cp} ranks; the loss and gradients are averaged over the
     * context-parallel group and every gradient reassembled into its global tensor.
     */
    private static Result run(TransformerConfig config, int tp, int cp, boolean masked) {
        return run(config, tp, cp, masked, LayerSpec.tensorParallel());
    }

    private static Result run(TransformerConfig config, int tp, int cp, boolean masked, LayerSpec spec) {
        List<Result> perRank = InJvmWorld.run(tp * cp, rank -> {
            ProcessGroups groups = GlobalGradients.groups(rank, tp, cp, config.hierarchicalContextParallelSizes());
            NDManager m = rank.manager();
            GptModel model = GlobalGradients.twoLayers(config, groups, m, spec);
            ContextParallelSplit split = ContextParallelSplit.of(groups.cp());
            double loss;
            try (AutogradScope scope = AutogradScope.open(m)) {
                NDArray[] data = TokenBatches.shifted(scope.manager(), config.vocabSize(), SEQ, BATCH, 7, 3);
                NDArray tokens = split.split(data[0], 0, scope.manager());
                NDArray labels = split.split(data[1], 0, scope.manager());
                NDArray mask = masked ? split.split(lossMask(scope.manager()), 0, scope.manager()) : null;
                NDArray l = model.forward(scope, tokens, null, labels, mask);
                scope.backward(l);
                loss = groups.cp().allReduce(l.toType(DataType.FLOAT64, false), ReduceOp.AVG, m).getDouble();
            }
            Map<String, double[]> global = GlobalGradients.averagedOverContextParallel(model, groups, m);
            return new Result(loss, global);
        });
        return perRank.get(0);
    }

    /** A fixed mask with about a third of the tokens ignored, unevenly over the sequence. */
    private static NDArray lossMask(NDManager m) {
        float[] values = new float[SEQ * BATCH];
        for (int i = 0; i < values.length; i++) {
            values[i] = (i * 5 + i / 7) % 3 == 0 || i < 6 ? 0f : 1f;
        }
        return m.create(values, new Shape(SEQ, BATCH));
    }
}
