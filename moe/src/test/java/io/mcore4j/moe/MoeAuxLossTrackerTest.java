package io.mcore4j.moe;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.List;

import org.junit.jupiter.api.Test;

/** The router's auxiliary losses reach the tracker as Megatron logs them: loss / coeff, summed per layer, reduced, scaled. */
class MoeAuxLossTrackerTest {
    static final int SEQ = 4;
    static final int BATCH = 2;
    static final int HIDDEN = 8;
    static final int EXPERTS = 4;
    static final int TOP_K = 2;
    static final double AUX = 0.02;
    static final double Z = 0.001;

    /** Host reference of Megatron's switch loss / coeff and z-loss / coeff for one micro-batch. */
    private static double[] reference(float[] logits, int tokens) {
        double[] counts = new double[EXPERTS];
        double[] probSums = new double[EXPERTS];
        double z = 0;
        for (int t = 0; t < tokens; t++) {
            double max = Double.NEGATIVE_INFINITY;
            for (int e = 0; e < EXPERTS; e++) {
                max = Math.max(max, logits[t * EXPERTS + e]);
            }
            double sum = 0;
            for (int e = 0; e < EXPERTS; e++) {
                sum += Math.exp(logits[t * EXPERTS + e] - max);
            }
            double lse = max + Math.log(sum);
            z += lse * lse / tokens;
            Integer[] order = {0, 1, 2, 3};
            final int row = t;
            java.util.Arrays.sort(order, (a, b) -> Float.compare(logits[row * EXPERTS + b], logits[row * EXPERTS + a]));
            for (int j = 0; j < TOP_K; j++) {
                counts[order[j]]++;
            }
            for (int e = 0; e < EXPERTS; e++) {
                probSums[e] += Math.exp(logits[t * EXPERTS + e] - lse);
            }
        }
        double aux = 0;
        for (int e = 0; e < EXPERTS; e++) {
            aux += probSums[e] * counts[e];
        }
        aux *= (double) EXPERTS / (TOP_K * (double) tokens * tokens);
        return new double[] {aux, z};
    }

    @Test
    void aStepOfTwoMicroBatchesReportsTheirAverageOnEachDataParallelRank() {
        MoeConfig config = MoeConfig.builder(EXPERTS, TOP_K, 8).initStd(0.5).auxLossCoeff(AUX).zLossCoeff(Z).build();
        List<double[]> results = InJvmWorld.run(2, ctx -> {
            ProcessGroups groups = ctx.groups(ParallelDims.builder(2).build()); // DP2
            try (NDManager m = ctx.manager().newSubManager();
                 MoeLayer layer = MoeLayer.build(config, HIDDEN, groups, m, new SeedScheme(3), "mlp.", new AuxLossScale());
                 MoeAuxLossTracker tracker = new MoeAuxLossTracker(m)) {
                layer.router().trackAuxLosses(tracker, 2, 3); // layer 2 of 3
                double[] expected = new double[2];
                for (int micro = 0; micro < 2; micro++) {
                    try (AutogradScope scope = AutogradScope.open(m)) {
                        NDArray tokens = Fixtures.normal(scope.manager(), 10 * ctx.rank() + micro, 1.0, SEQ * BATCH, HIDDEN);
                        float[] logits = tokens.matMul(layer.router().weight().data().transpose()).toFloatArray();
                        double[] r = reference(logits, SEQ * BATCH);
                        expected[0] += r[0];
                        expected[1] += r[1];
                        layer.router().route(scope, tokens, SEQ, BATCH);
                    }
                }
                try (AutogradScope noGrad = AutogradScope.openNoGrad(m)) {
                    layer.router().route(noGrad, Fixtures.normal(noGrad.manager(), 99, 1.0, SEQ * BATCH, HIDDEN), SEQ, BATCH);
                }
                double[] local = tracker.localValues("load_balancing_loss");
                assertEquals(3, local.length);
                assertEquals(0.0, local[0]);
                assertEquals(expected[0], local[1], 1e-5, "rank " + ctx.rank() + ": two micro-batches, evaluation not recorded");
                assertEquals(expected[1], tracker.localValues("z_loss")[1], 1e-4 * expected[1]);
                MoeAuxLossTracker.Report report = tracker.report(0.5, 1, groups);
                assertEquals(0.0, tracker.localValues("z_loss")[1], "report clears");
                assertTrue(report.format().contains(" load_balancing_loss: "), report.format());
                return new double[] {expected[0], expected[1], report.averages().get("load_balancing_loss"),
                        report.averages().get("z_loss"), report.perLayer().get("load_balancing_loss")[1]};
            }
        });
        double[] a = results.get(0);
        double[] b = results.get(1);
        double lb = 0.5 * (a[0] + b[0]) / 2; // DP average of each rank's sum, times 1 / micro-batches
        double z = 0.5 * (a[1] + b[1]) / 2;
        for (double[] r : results) {
            assertEquals(lb, r[2], 1e-5, "load balancing loss");
            assertEquals(z, r[3], 1e-4 * z, "z loss");
            assertEquals(r[2], r[4], 1e-7, "one MoE layer: the average is the layer's value");
        }
    }

    @Test
    void aPipelineStageWithoutMoeLayersStillTakesPartAndGetsTheModelsValues() {
        List<double[]> results = InJvmWorld.run(2, ctx -> {
            ProcessGroups groups = ctx.groups(ParallelDims.builder(2).pipelineParallel(2).build());
            try (NDManager m = ctx.manager().newSubManager(); MoeAuxLossTracker tracker = new MoeAuxLossTracker(m)) {
                tracker.expect("z_loss", 4, MoeAuxLossTracker.Reduction.AVERAGE_TP_DP_CP);
                tracker.expect("load_balancing_loss", 4, MoeAuxLossTracker.Reduction.SUM_TP_CP);
                if (groups.pipelineRank() == 0) { // layers 1 and 2 are MoE layers on the first stage only
                    tracker.record("load_balancing_loss", 1, 4, m.create(1.5f), MoeAuxLossTracker.Reduction.SUM_TP_CP);
                    tracker.record("load_balancing_loss", 2, 4, m.create(2.5f), MoeAuxLossTracker.Reduction.SUM_TP_CP);
                }
                MoeAuxLossTracker.Report r = tracker.report(1.0, 2, groups);
                return new double[] {r.averages().get("load_balancing_loss"), r.averages().get("z_loss"),
                        r.perLayer().get("load_balancing_loss")[1]};
            }
        });
        for (double[] r : results) {
            assertArrayEquals(new double[] {2.0, 0.0, 2.5}, r, 1e-7);
        }
    }

    /** The training loop reports once per logged window: the sum of the steps' reports, as if each were reported. */
    @Test
    void oneReportOfSeveralStepsIsTheSumOfTheirReports() {
        List<double[]> results = InJvmWorld.run(2, ctx -> {
            ProcessGroups groups = ctx.groups(ParallelDims.builder(2).build()); // DP2
            try (NDManager m = ctx.manager().newSubManager(); MoeAuxLossTracker each = new MoeAuxLossTracker(m);
                 MoeAuxLossTracker once = new MoeAuxLossTracker(m)) {
                double[] sums = new double[3];
                for (int step = 0; step < 3; step++) {
                    for (MoeAuxLossTracker t : List.of(each, once)) {
                        for (int micro = 0; micro < 2; micro++) {
                            float v = 0.25f * (step + 1) + micro + ctx.rank();
                            t.record("load_balancing_loss", 1, 3, m.create(v), MoeAuxLossTracker.Reduction.SUM_TP_CP);
                            t.record("load_balancing_loss", 3, 3, m.create(2 * v), MoeAuxLossTracker.Reduction.SUM_TP_CP);
                            t.record("z_loss", 3, 3, m.create(v * v), MoeAuxLossTracker.Reduction.AVERAGE_TP_DP_CP);
                        }
                    }
                    MoeAuxLossTracker.Report r = each.report(0.5, 2, groups);
                    sums[0] += r.averages().get("load_balancing_loss");
                    sums[1] += r.averages().get("z_loss");
                    sums[2] += r.perLayer().get("load_balancing_loss")[2];
                }
                MoeAuxLossTracker.Report window = once.report(0.5, 2, groups);
                return new double[] {sums[0], sums[1], sums[2], window.averages().get("load_balancing_loss"),
                        window.averages().get("z_loss"), window.perLayer().get("load_balancing_loss")[2],
                        window.perLayer().get("load_balancing_loss")[1]};
            }
        });
        for (double[] r : results) {
            assertEquals(r[0], r[3], 1e-5, "load balancing loss over the window");
            assertEquals(r[1], r[4], 1e-5, "z loss over the window");
            assertEquals(r[2], r[5], 1e-5, "layer 3 over the window");
            assertEquals(0.0, r[6], "a layer that recorded nothing");
        }
        // by hand: layer 1's values summed over ranks' DP average, steps and micro-batches, times 1/2, over 2 layers
        double layer1 = 0;
        for (int step = 0; step < 3; step++) {
            for (int micro = 0; micro < 2; micro++) {
                layer1 += 0.5 * ((0.25 * (step + 1) + micro) + (0.25 * (step + 1) + micro + 1)) / 2;
            }
        }
        assertEquals(3 * layer1 / 2, results.get(0)[3], 1e-5, "layers 1 and 3 (twice layer 1) averaged over 2 MoE layers");
    }

    @Test
    void misuseIsNamed() {
        try (NDManager m = NDManager.newBaseManager(); MoeAuxLossTracker tracker = new MoeAuxLossTracker(m)) {
            NDArray one = m.create(1f);
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> tracker.record("z_loss", 4, 3, one, MoeAuxLossTracker.Reduction.AVERAGE_TP_DP_CP));
            assertEquals("layer number 4 of 3 layers for z_loss: expected 1..3", e.getMessage());
            tracker.record("z_loss", 1, 3, one, MoeAuxLossTracker.Reduction.AVERAGE_TP_DP_CP);
            tracker.record("z_loss", 1, 3, one, MoeAuxLossTracker.Reduction.AVERAGE_TP_DP_CP);
            assertArrayEquals(new double[] {2, 0, 0}, tracker.localValues("z_loss"));
            assertThrows(IllegalArgumentException.class,
                    () -> tracker.record("z_loss", 1, 3, one, MoeAuxLossTracker.Reduction.SUM_TP_CP));
        }
    }

    /**
     * A CUDA graph that captured the records replays their additions into the same tensors, without the host: the
     * accumulators must stay the tensors the reports read, cleared in place (a NaN included), never replaced.
     */
    @Test
    void theAccumulatorsStayInPlaceAcrossReportsAsAReplayedGraphNeeds() {
        double[] reported = InJvmWorld.run(1, ctx -> {
            ProcessGroups groups = ctx.groups(ParallelDims.builder(1).build());
            try (NDManager m = ctx.manager().newSubManager(); MoeAuxLossTracker tracker = new MoeAuxLossTracker(m)) {
                MoeAuxLossTracker.Reduction sum = MoeAuxLossTracker.Reduction.SUM_TP_CP;
                tracker.record("load_balancing_loss", 1, 2, m.create(Float.NaN), sum);
                NDArray captured = tracker.accumulator("load_balancing_loss", 1);
                assertTrue(Double.isNaN(tracker.report(1.0, 2, groups).perLayer().get("load_balancing_loss")[0]));
                assertEquals(0f, captured.getFloat(), "cleared in place, NaN and all");
                // what a replay does: the captured additions, with no record on the host
                captured.addi(m.create(1.5f));
                captured.addi(m.create(0.5f));
                double first = tracker.report(0.5, 2, groups).perLayer().get("load_balancing_loss")[0];
                tracker.record("load_balancing_loss", 1, 2, m.create(3f), sum);
                assertTrue(captured == tracker.accumulator("load_balancing_loss", 1), "the same tensor after reports");
                double second = tracker.report(1.0, 2, groups).perLayer().get("load_balancing_loss")[0];
                return new double[] {first, second};
            }
        }).get(0);
        assertArrayEquals(new double[] {1.0, 3.0}, reported, "the replays' sums, times the loss scale");
    }
}
