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
import io.mcore4j.core.PackedSequences;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.transformer.AttentionBackend;
import io.mcore4j.models.transformer.LayerSpec;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.models.transformer.TokenPositions;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.ReduceOp;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.Test;

/**
 * A micro-batch of packed sequences against the same sequences run one at a time, unpacked, by the
 * serial model with the same seeds: every sequence's loss (read from the packed run with a loss mask of
 * that sequence alone) and the gradients of the packed micro-batch's mean loss (the token-weighted mean of
 * the sequences' gradients) must agree within 1e-5, at TP1, TP2 (with sequence parallelism) and CP2
 * (per-sequence split with the p2p ring and the all-gather; the whole-column split of packings that
 * 2·CP does not divide; a2a) and CP4 as a2a+p2p 2 x 2 (whole-column split), for the composed attention and
 * the fused one (the packed SDPA module's masked CPU path), with RoPE and learned positions, GQA, recompute, and a
 * sliding window.
 */
class PackedSequencesGptTest {
    private static final int SEQ = 16;
    private static final double TOLERANCE = 1e-5;
    /** Every length a multiple of 2·CP at CP2: split per sequence. */
    private static final PackedSequences EVEN = PackedSequences.ofLengths(new int[] {4, 8, 4}, new int[] {12, 4});
    /** Documents of any length: split per column at CP2. */
    private static final PackedSequences DOCUMENTS = PackedSequences.ofLengths(new int[] {5, 3, 8}, new int[] {7, 1, 8});

    private static TransformerConfig.Builder gqaRope() {
        return TransformerConfig.builder(2, 32, 4, 64).maxSequenceLength(SEQ).dropout(0, 0).queryGroups(2)
                .positionEmbedding(TransformerConfig.PositionEmbedding.ROPE);
    }

    private static TransformerConfig.Builder learned() {
        return TransformerConfig.builder(2, 32, 4, 64).maxSequenceLength(SEQ).dropout(0, 0);
    }

    private static LayerSpec fused(TransformerConfig c) {
        return AttentionBackend.FUSED.layerSpec(c, true);
    }

    @Test
    void composedAttentionMatchesUnpackedSequences() {
        TransformerConfig c = gqaRope().build();
        Result reference = unpacked(c, EVEN);
        assertMatches(reference, packed(c, 1, 1, LayerSpec.tensorParallel(), EVEN), "TP1");
        assertMatches(reference, packed(c, 2, 1, LayerSpec.tensorParallel(), EVEN), "TP2");
        assertMatches(reference, packed(gqaRope().sequenceParallel(true).build(), 2, 1, LayerSpec.tensorParallel(), EVEN),
                "TP2 SP");
        assertMatches(reference, packed(c, 1, 2, LayerSpec.tensorParallel(), EVEN), "CP2 p2p, split per sequence");
        assertMatches(reference, packed(gqaRope().cpCommType(CpCommType.ALL_GATHER).build(), 1, 2, LayerSpec.tensorParallel(),
                EVEN), "CP2 allgather, split per sequence");
        TransformerConfig recomputed = gqaRope().recompute(TransformerConfig.Recompute.SELECTIVE).build();
        assertMatches(reference, packed(recomputed, 1, 2, LayerSpec.tensorParallel(), EVEN), "CP2 selective recompute");

        Result documents = unpacked(c, DOCUMENTS);
        assertMatches(documents, packed(c, 1, 2, LayerSpec.tensorParallel(), DOCUMENTS), "CP2 p2p, split per column");
        assertMatches(documents, packed(gqaRope().cpCommType(CpCommType.A2A).build(), 1, 2, LayerSpec.tensorParallel(),
                DOCUMENTS), "CP2 a2a, split per column");
        // at CP4 EVEN is split per column (8 does not divide 4), though 2 x the ring's 2 ranks divides every length:
        // the ring's masks must follow the micro-batch's split, its ranks holding their pair's tokens
        assertMatches(reference, packed(hierarchical(), 1, 4, LayerSpec.tensorParallel(), EVEN),
                "CP4 a2a+p2p 2 x 2, split per column");

        TransformerConfig positions = learned().build();
        assertMatches(unpacked(positions, EVEN), packed(learned().sequenceParallel(true).build(), 2, 2, LayerSpec.tensorParallel(),
                EVEN), "learned positions TP2 SP CP2");
    }

    @Test
    void fusedAttentionMatchesUnpackedSequences() {
        TransformerConfig c = gqaRope().build();
        Result reference = unpacked(c, EVEN);
        assertMatches(reference, packed(c, 1, 1, fused(c), EVEN), "fused TP1");
        assertMatches(reference, packed(c, 2, 1, fused(c), EVEN), "fused TP2");
        TransformerConfig full = gqaRope().recompute(TransformerConfig.Recompute.FULL).build();
        assertMatches(reference, packed(full, 1, 1, fused(full), EVEN), "fused TP1 full recompute");
        // auto under context parallelism gives packed data the composed attention
        assertMatches(reference, packed(c, 1, 2, AttentionBackend.AUTO.layerSpec(c, true), EVEN), "auto CP2 p2p");
        TransformerConfig a2a = gqaRope().cpCommType(CpCommType.A2A).build();
        assertMatches(unpacked(c, DOCUMENTS), packed(a2a, 1, 2, fused(a2a), DOCUMENTS), "fused CP2 a2a, split per column");
    }

    /**
     * Sliding windows (3 tokens, on the second layer; sequences of up to 8 tokens): the block-diagonal mask cut to
     * the window gives each sequence's own windowed run, composed at TP1 and CP2 a2a, and through auto, which takes
     * the composed attention for the windowed layer and the fused one for the other; a fused backend named
     * explicitly is refused, having no packed windowed module.
     */
    @Test
    void slidingWindowsCutTheBlockDiagonalMask() {
        TransformerConfig.SlidingWindow window = new TransformerConfig.SlidingWindow(3, 0, List.of(false, true));
        TransformerConfig c = gqaRope().slidingWindow(window).build();
        Result reference = unpacked(c, EVEN);
        assertMatches(reference, packed(c, 1, 1, LayerSpec.tensorParallel(), EVEN), "windowed TP1");
        assertMatches(reference, packed(c, 1, 1, AttentionBackend.AUTO.layerSpec(c, true), EVEN), "windowed auto TP1");
        TransformerConfig a2a = gqaRope().slidingWindow(window).cpCommType(CpCommType.A2A).build();
        assertMatches(unpacked(c, DOCUMENTS), packed(a2a, 1, 2, LayerSpec.tensorParallel(), DOCUMENTS),
                "windowed CP2 a2a, split per column");
        Throwable refused = assertThrows(InJvmWorld.RankFailedException.class,
                () -> packed(c, 1, 1, fused(c), EVEN)).getCause();
        assertEquals("--attention-backend fused has no packed path for sliding-window layers; packed sequences with a window"
                + " need --attention-backend unfused (or auto)", refused.getMessage());
    }

    private static TransformerConfig hierarchical() {
        return gqaRope().cpCommType(CpCommType.A2A_P2P).hierarchicalContextParallelSizes(List.of(2, 2)).build();
    }

    @Test
    void packingsWithoutAPathAreRefused() {
        Throwable ring = assertThrows(InJvmWorld.RankFailedException.class,
                () -> packed(gqaRope().build(), 1, 2, fused(gqaRope().build()), EVEN)).getCause();
        assertEquals("--attention-backend fused under context parallelism runs a fused ring, which has no packed path;"
                + " packed sequences need --attention-backend unfused (or auto)", ring.getMessage());
        TransformerConfig a2a = gqaRope().cpCommType(CpCommType.A2A).build();
        Throwable ulysses = assertThrows(InJvmWorld.RankFailedException.class,
                () -> packed(a2a, 1, 2, LayerSpec.tensorParallel(), EVEN)).getCause();
        assertTrue(ulysses instanceof IllegalArgumentException && ulysses.getMessage().startsWith(
                "--cp-comm-type a2a gathers whole columns in position order; packed sequences whose lengths are multiples"
                        + " of 2 x context parallel size 2 are split per sequence"), ulysses.toString());
        PackedSequences perSequenceAtCp4 = PackedSequences.ofLengths(new int[] {8, 8}, new int[] {16});
        Throwable hierarchical = assertThrows(InJvmWorld.RankFailedException.class,
                () -> packed(hierarchical(), 1, 4, LayerSpec.tensorParallel(), perSequenceAtCp4)).getCause();
        assertTrue(hierarchical instanceof IllegalArgumentException && hierarchical.getMessage().startsWith(
                "--cp-comm-type a2a+p2p gathers whole columns in position order; packed sequences whose lengths are"
                        + " multiples of 2 x context parallel size 4 are split per sequence"), hierarchical.toString());
        Throwable fusedRing = assertThrows(InJvmWorld.RankFailedException.class,
                () -> packed(hierarchical(), 1, 4, fused(hierarchical()), EVEN)).getCause();
        assertEquals("--attention-backend fused under context parallelism runs a fused ring, which has no packed path;"
                + " packed sequences need --attention-backend unfused (or auto)", fusedRing.getMessage());
    }

    /** Losses of the packed run's sequences (column by column) and of the whole micro-batch, gradients of the latter. */
    private record Result(double[] sequenceLosses, double loss, Map<String, double[]> gradients) {}

    private static void assertMatches(Result expected, Result actual, String what) {
        for (int i = 0; i < expected.sequenceLosses.length; i++) {
            double e = expected.sequenceLosses[i];
            assertEquals(e, actual.sequenceLosses[i], TOLERANCE * Math.abs(e), "loss of sequence " + i + " with " + what);
        }
        assertEquals(expected.loss, actual.loss, TOLERANCE * Math.abs(expected.loss), "loss with " + what);
        GlobalGradients.assertClose(expected.gradients, actual.gradients, TOLERANCE, what);
    }

    /**
     * The packed micro-batch on {@code tp·cp} ranks: each sequence's loss under a mask of it alone (no
     * grad), then the mean loss of all tokens and its gradients, averaged over the context-parallel group.
     */
    private static Result packed(TransformerConfig config, int tp, int cp, LayerSpec spec, PackedSequences packed) {
        List<Result> perRank = InJvmWorld.run(tp * cp, rank -> {
            ProcessGroups groups = GlobalGradients.groups(rank, tp, cp, config.hierarchicalContextParallelSizes());
            NDManager m = rank.manager();
            GptModel model = GlobalGradients.twoLayers(config, groups, m, spec);
            ContextParallelSplit split = ContextParallelSplit.of(groups.cp());
            List<Double> sequenceLosses = new ArrayList<>();
            double loss;
            try (NDManager sm = m.newSubManager()) {
                NDArray[] data = TokenBatches.shifted(sm, config.vocabSize(), SEQ, packed.columns(), 7, 3);
                NDArray tokens = split.split(data[0], packed, sm);
                NDArray labels = split.split(data[1], packed, sm);
                TokenPositions positions = new TokenPositions(split.split(packed.positionIds(sm), packed, sm), packed);
                for (int c = 0; c < packed.columns(); c++) {
                    int[] offsets = packed.offsets(c);
                    for (int j = 0; j + 1 < offsets.length; j++) {
                        NDArray mask = split.split(sequenceMask(sm, packed, c, offsets[j], offsets[j + 1]), packed, sm);
                        try (AutogradScope eval = AutogradScope.openNoGrad(m)) {
                            NDArray l = model.forward(eval, tokens, null, labels, mask, positions);
                            sequenceLosses.add(averageOverCp(groups, l, m));
                        }
                    }
                }
                try (AutogradScope scope = AutogradScope.open(m)) {
                    NDArray l = model.forward(scope, tokens, null, labels, null, positions);
                    scope.backward(l);
                    loss = averageOverCp(groups, l, m);
                }
            }
            return new Result(sequenceLosses.stream().mapToDouble(Double::doubleValue).toArray(), loss,
                    GlobalGradients.averagedOverContextParallel(model, groups, m));
        });
        return perRank.get(0);
    }

    /**
     * Each sequence alone through a freshly built serial model (same seeds, so the same weights): its
     * mean loss, and the token-weighted mean of the sequences' losses and gradients, which is the packed
     * micro-batch's mean loss and its gradient.
     */
    private static Result unpacked(TransformerConfig config, PackedSequences packed) {
        List<Result> only = InJvmWorld.run(1, rank -> {
            ProcessGroups groups = GlobalGradients.groups(rank, 1, 1);
            NDManager m = rank.manager();
            int total = packed.columns() * packed.sequenceLength();
            List<Double> losses = new ArrayList<>();
            double loss = 0;
            Map<String, double[]> gradients = new HashMap<>();
            for (int c = 0; c < packed.columns(); c++) {
                int[] offsets = packed.offsets(c);
                for (int j = 0; j + 1 < offsets.length; j++) {
                    try (NDManager own = m.newSubManager()) {
                        GptModel model = GlobalGradients.twoLayers(config, groups, own, LayerSpec.tensorParallel());
                        double weight = (offsets[j + 1] - offsets[j]) / (double) total;
                        try (AutogradScope scope = AutogradScope.open(own)) {
                            NDArray[] data = TokenBatches.shifted(scope.manager(), config.vocabSize(), SEQ, packed.columns(), 7, 3);
                            String rows = offsets[j] + ":" + offsets[j + 1] + ", " + c + ":" + (c + 1);
                            NDArray l = model.forward(scope, data[0].get(rows), null, data[1].get(rows));
                            scope.backward(l);
                            double value = l.toType(DataType.FLOAT64, false).getDouble();
                            losses.add(value);
                            loss += weight * value;
                        }
                        for (Map.Entry<String, double[]> e : GlobalGradients.averagedOverContextParallel(model, groups, own).entrySet()) {
                            double[] sum = gradients.computeIfAbsent(e.getKey(), k -> new double[e.getValue().length]);
                            for (int i = 0; i < sum.length; i++) {
                                sum[i] += weight * e.getValue()[i];
                            }
                        }
                    }
                }
            }
            return new Result(losses.stream().mapToDouble(Double::doubleValue).toArray(), loss, gradients);
        });
        return only.get(0);
    }

    private static double averageOverCp(ProcessGroups groups, NDArray loss, NDManager m) {
        return groups.cp().allReduce(loss.toType(DataType.FLOAT64, false), ReduceOp.AVG, m).getDouble();
    }

    /** Loss mask [S, b]: 1 on tokens {@code [start, end)} of column {@code column}, 0 elsewhere. */
    private static NDArray sequenceMask(NDManager m, PackedSequences packed, int column, int start, int end) {
        int b = packed.columns();
        float[] values = new float[packed.sequenceLength() * b];
        for (int t = start; t < end; t++) {
            values[t * b + column] = 1f;
        }
        return m.create(values, new Shape(packed.sequenceLength(), b));
    }
}
