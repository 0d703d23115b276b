package io.mcore4j.planner;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.models.GptConfigs;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.TransformerConfig.Recompute;
import io.mcore4j.tensorparallel.Vocab;

import java.util.List;

import org.junit.jupiter.api.Test;

/** The search keeps exactly the layouts the training setup accepts, ranks them, and explains an empty result. */
class LayoutSearchTest {
    private static final Calibration H200 = Calibration.builtIn("h200");

    /** Every accepted layout satisfies the divisibility rules; every rule rejects something in this space. */
    @Test
    void acceptedLayoutsRespectEveryDivisibilityRule() {
        // 12 heads, 4 query groups, 6 layers, vocabulary 1000: TP 8 breaks heads, TP 3 does not divide 8 GPUs,
        // PP 4 breaks the layers, and the global batch of 12 breaks DP 8
        TransformerConfig model = TransformerConfig.builder(6, 768, 12, 1000).queryGroups(4).maxSequenceLength(1024)
                .dropout(0, 0).build();
        Workload w = ReadmeFigures.workload(model.toBuilder().dtype(ai.djl.ndarray.types.DataType.FLOAT16).build(), 1024,
                12, 1, 1, true);
        LayoutSearch search = new LayoutSearch(w, ClusterSpec.h200(8, 1), H200, SearchSpace.defaults());
        List<PlannedLayout> all = search.evaluateAll();
        assertFalse(all.isEmpty());
        for (PlannedLayout p : all) {
            Layout l = p.layout();
            TransformerConfig c = w.modelFor(l);
            assertEquals(8, l.tensorParallel() * l.pipelineParallel() * l.contextParallel() * l.dataParallel(), l.name());
            assertEquals(0, 12 % l.tensorParallel(), l.name());
            assertEquals(0, 4 % l.tensorParallel(), l.name());
            assertEquals(0, 6 % (l.pipelineParallel() * l.virtualStages()), l.name());
            assertEquals(0, c.vocabSize() % l.tensorParallel(), l.name());
            assertEquals(Vocab.padded(1000, 128, l.tensorParallel()), c.vocabSize(), l.name());
            assertEquals(0, 12 % ((long) l.microBatchSize() * l.dataParallel()), l.name());
            assertEquals(0, 1024 % (2 * l.contextParallel()), l.name());
        }
        List<Layout> candidates = search.candidates();
        assertTrue(candidates.stream().anyMatch(l -> l.tensorParallel() == 8), "TP8 was tried");
        assertTrue(all.stream().noneMatch(p -> p.layout().tensorParallel() == 8), "TP8 breaks 4 query groups");
        assertTrue(all.stream().noneMatch(p -> p.layout().pipelineParallel() == 4), "PP4 breaks 6 layers");
        assertTrue(all.stream().noneMatch(p -> p.layout().dataParallel() == 8), "DP8 breaks a global batch of 12");
        assertTrue(all.stream().anyMatch(p -> p.layout().pipelineParallel() == 2 && p.layout().virtualStages() == 3
                        || p.layout().pipelineParallel() == 2), "PP2 divides 6 layers");
        Layout tp8 = new Layout(8, 1, 1, 1, 1, 1, 1, Recompute.NONE, false);
        assertTrue(search.rejection(tp8).contains("not divisible by tensor parallel size 8"), search.rejection(tp8));
        Layout dp8 = new Layout(1, 1, 1, 8, 1, 1, 1, Recompute.NONE, false);
        assertTrue(search.rejection(dp8).contains("--global-batch-size 12"), search.rejection(dp8));
        Layout pp4 = new Layout(2, 4, 1, 1, 1, 1, 1, Recompute.NONE, false);
        assertTrue(search.rejection(pp4).contains("6 layers"), search.rejection(pp4));
        assertNull(search.rejection(new Layout(4, 2, 1, 1, 1, 1, 1, Recompute.NONE, false)));
    }

    @Test
    void theBestFourGpuLayoutsFor1_3bAreDataParallel() {
        Workload w = ReadmeFigures.gpt1_3b(4, 2, 4, false);
        List<PlannedLayout> best = new LayoutSearch(w, ClusterSpec.h200(4, 1), H200, SearchSpace.defaults()).best(5);
        assertEquals(5, best.size());
        Layout first = best.get(0).layout();
        assertEquals(4, first.dataParallel(), first.name());
        for (int i = 1; i < best.size(); i++) {
            assertTrue(best.get(i - 1).time().total() <= best.get(i).time().total());
            assertTrue(best.get(i).fits());
        }
    }

    @Test
    void layoutsThatDoNotFitAreLeftOutAndTheErrorNamesTheSmallestPeak() {
        Workload w = ReadmeFigures.workload(GptConfigs.llama7b(), 1, 4, 1, true);
        ClusterSpec small = new ClusterSpec(1, 1, 40, 989, 4800, 300, 45);
        NoLayoutFitsException e = assertThrows(NoLayoutFitsException.class,
                () -> new LayoutSearch(w, small, H200, SearchSpace.defaults()).best(3));
        assertTrue(e.getMessage().contains("none fits in 40.0 GiB"), e.getMessage());
        assertTrue(e.getMessage().contains("the smallest peak is TP1 PP1 DP1 mb"), e.getMessage());
        assertTrue(e.getMessage().contains("optimizer"), e.getMessage());
    }

    @Test
    void theErrorNamesTheConstraintWhenNoLayoutPassesTheChecks() {
        // 7 layers and 7 heads on 4 GPUs with a global batch of 1: TP 2 and 4 break the heads, PP 2 and 4 the
        // layers, DP 2 and 4 the batch, CP 2 and 4 the sequence of 7 tokens
        TransformerConfig model = TransformerConfig.builder(7, 448, 7, 1000).maxSequenceLength(7).dropout(0, 0)
                .dtype(ai.djl.ndarray.types.DataType.FLOAT16).build();
        Workload w = ReadmeFigures.workload(model, 7, 1, 1, 1, true);
        NoLayoutFitsException e = assertThrows(NoLayoutFitsException.class,
                () -> new LayoutSearch(w, ClusterSpec.h200(4, 1), H200, SearchSpace.defaults()).best(3));
        String m = e.getMessage();
        assertTrue(m.contains("no layout of 4 GPUs"), m);
        assertTrue(m.contains("attention heads are not divisible by tensor parallel size"), m);
        assertTrue(m.contains("no layout passes those checks"), m);
    }
}
