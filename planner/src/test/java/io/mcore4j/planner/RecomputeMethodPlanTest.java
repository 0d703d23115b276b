package io.mcore4j.planner;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.models.TransformerConfig.Recompute;
import io.mcore4j.models.TransformerConfig.RecomputeMethod;

import java.util.List;

import org.junit.jupiter.api.Test;

/**
 * The planner's view of Megatron's {@code --recompute-method}: for the 1.3B GPT (24 layers) on one
 * H200, block recompute of k layers costs memory between no recompute and recomputing every layer,
 * falling with k, and time rising with k; block of all layers is uniform with one layer per group;
 * uniform groups keep fewer inputs but rerun more layers at once; a search over a GPU too small for
 * no recompute offers, beside full recompute of every layer, block with the fewest layers that fit,
 * estimated faster.
 */
class RecomputeMethodPlanTest {
    private static final Calibration H200 = Calibration.builtIn("h200");
    private static final int LAYERS = 24;

    private static Workload workload() {
        return ReadmeFigures.gpt1_3b(4, 4, 1, true);
    }

    private static Layout full() {
        return ReadmeFigures.layout(1, 1, 1, 4, Recompute.FULL);
    }

    private static long memory(Layout layout) {
        return MemoryModel.estimate(workload(), layout, H200).total();
    }

    private static double time(Layout layout) {
        return TimeModel.estimate(workload(), layout, ClusterSpec.h200(1, 1), H200).total();
    }

    /** Bytes the 24 layers keep under block k (k = 0: no recompute). */
    private static double blockActivations(int k) {
        Layout l = k == 0 ? ReadmeFigures.layout(1, 1, 1, 4, Recompute.NONE) : full().withFullRecompute(RecomputeMethod.BLOCK, k);
        return new ActivationModel(workload().modelFor(l), 1, 1, true).perChunk(4, 2048, LAYERS);
    }

    @Test
    void blockLiesBetweenNoRecomputeAndFull() {
        long none = memory(ReadmeFigures.layout(1, 1, 1, 4, Recompute.NONE));
        long everyLayer = memory(full());
        long previous = none;
        double previousTime = time(ReadmeFigures.layout(1, 1, 1, 4, Recompute.NONE));
        for (int k = 1; k < LAYERS; k++) {
            Layout block = full().withFullRecompute(RecomputeMethod.BLOCK, k);
            long m = memory(block);
            double t = time(block);
            // the peak is the larger of the activations' and the optimizer step's: it stops falling once the step's is larger
            assertTrue(m <= previous && m >= everyLayer, "block " + k + ": " + m + " between " + everyLayer + " and " + previous);
            assertTrue(m < none || k > 1, "block 1 saves memory");
            assertTrue(blockActivations(k) < blockActivations(k - 1), "block " + k + " keeps less than block " + (k - 1));
            assertTrue(t > previousTime && t < time(full()), "block " + k + " time " + t);
            previous = m;
            previousTime = t;
        }
        assertEquals(everyLayer, memory(full().withFullRecompute(RecomputeMethod.BLOCK, LAYERS)), "block 24 is uniform 1");
        assertEquals(time(full()), time(full().withFullRecompute(RecomputeMethod.BLOCK, LAYERS)), 0);
        // uniform 4: 6 inputs kept instead of 24, 4 layers rerun at once instead of 1
        Layout uniform4 = full().withFullRecompute(RecomputeMethod.UNIFORM, 4);
        ActivationModel act = new ActivationModel(workload().modelFor(uniform4), 1, 1, true);
        ActivationModel one = new ActivationModel(workload().modelFor(full()), 1, 1, true);
        assertEquals(6 * act.layerInput(4, 2048), act.perChunk(4, 2048, LAYERS), 1);
        assertEquals(24 * one.layerInput(4, 2048), one.perChunk(4, 2048, LAYERS), 1);
        double plainLayer = new ActivationModel(workload().modelFor(ReadmeFigures.layout(1, 1, 1, 4, Recompute.NONE)), 1, 1, true)
                .plainLayer(4, 2048);
        assertEquals(3 * plainLayer, act.backwardTransient(4, 2048, LAYERS) - one.backwardTransient(4, 2048, LAYERS), 1,
                "four layers' activations live at once in backward instead of one");
        assertEquals(time(full()), time(uniform4), 1e-12, "uniform reruns every layer whatever the group");
    }

    @Test
    void theSearchOffersBlockWithTheFewestLayersThatFit() {
        long none = memory(ReadmeFigures.layout(1, 1, 1, 4, Recompute.NONE));
        long everyLayer = memory(full());
        // a GPU with room for about half the difference
        double gib = (everyLayer + (none - everyLayer) / 2.0) / (1L << 30);
        ClusterSpec small = new ClusterSpec(1, 1, gib, 989, 4800, 400, 50);
        LayoutSearch search = new LayoutSearch(workload(), small, H200,
                new SearchSpace(4, List.of(Recompute.NONE, Recompute.FULL), List.of(false), List.of(1), List.of(1), true));
        List<PlannedLayout> all = search.evaluateAll();
        PlannedLayout none4 = find(all, Recompute.NONE, null);
        PlannedLayout uniform = find(all, Recompute.FULL, RecomputeMethod.UNIFORM);
        PlannedLayout block = find(all, Recompute.FULL, RecomputeMethod.BLOCK);
        assertTrue(!none4.fits() && uniform.fits() && block.fits(), none4.fits() + " " + uniform.fits() + " " + block.fits());
        Layout l = block.layout();
        long capacity = small.gpuMemoryBytes();
        assertTrue(l.recomputeNumLayers() > 1 && l.recomputeNumLayers() < LAYERS, l.name());
        assertTrue(memory(l.withFullRecompute(RecomputeMethod.BLOCK, l.recomputeNumLayers() - 1)) > capacity,
                "one layer fewer does not fit: " + l.name());
        assertTrue(block.time().total() < uniform.time().total(), "block " + l.name() + " is faster than every layer recomputed");
        assertTrue(l.flags(LAYERS).contains("--recompute-method block --recompute-num-layers " + l.recomputeNumLayers()));
    }

    /** The micro-batch-4 layout of the search with this recompute. */
    private static PlannedLayout find(List<PlannedLayout> all, Recompute recompute, RecomputeMethod method) {
        return all.stream().filter(p -> p.layout().microBatchSize() == 4 && p.layout().recompute() == recompute
                && p.layout().recomputeMethod() == method).findFirst().orElseThrow();
    }
}
