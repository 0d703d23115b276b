package io.mcore4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Pipelined runs of {@link ToyPipelineModel} against the same model without pipelining: losses
 * and every rank's parameter gradients (tensor-parallel slices where split) must match within 1e-5.
 * The no-pipelining run is itself checked against a plain loop with one backward over all
 * micro-batches.
 */
class PipelineScheduleTest {
    private static final double TOLERANCE = 1e-5;
    private static final Map<String, Reference> REFERENCES = new HashMap<>();

    /** Losses and full gradients of the serial model. */
    record Reference(float[] losses, Map<String, float[]> grads) {}

    /** What one rank reports. */
    record RankRun(int stage, int tpRank, int warmup, ScheduleResult result, Map<String, float[]> grads,
                   List<VirtualMicroBatch> forwardCalls) {}

    @BeforeAll
    static void serialReferences() {
        for (int m : new int[] {4, 5, 8}) {
            for (boolean variable : new boolean[] {false, true}) {
                REFERENCES.put(m + "/" + variable, reference(m, variable));
            }
        }
    }

    static Stream<Arguments> layouts() {
        List<Arguments> out = new ArrayList<>();
        for (int m : new int[] {4, 8}) {
            out.add(Arguments.of("PP2", 1, 2, 1, 0, m));
            out.add(Arguments.of("PP4", 1, 4, 1, 0, m));
            out.add(Arguments.of("PP2xVP2", 1, 2, 2, 0, m));
            out.add(Arguments.of("PP2xTP2", 2, 2, 1, 0, m));
            out.add(Arguments.of("PP4xVP2", 1, 4, 2, 0, m));
        }
        out.add(Arguments.of("PP2xVP2 G3", 1, 2, 2, 3, 5));
        out.add(Arguments.of("PP2xVP4 G2", 1, 2, 4, 2, 4));
        return out.stream();
    }

    @ParameterizedTest(name = "{0} M={5}")
    @MethodSource("layouts")
    void pipelinedTrainingMatchesSerial(String name, int tp, int pp, int vp, int group, int m) {
        ScheduleConfig config = ScheduleConfig.of(m, ToyPipelineModel.ACTIVATION, DataType.FLOAT32)
                .withMicroBatchGroupSize(group);
        List<RankRun> runs = runWorld(tp, pp, vp, config, 1);
        check(name, runs, REFERENCES.get(m + "/false"), tp, pp, vp, config);
    }

    @Test
    void variableSequenceLengthsExchangeShapes() {
        ScheduleConfig config = ScheduleConfig.of(5, ToyPipelineModel.ACTIVATION, DataType.FLOAT32)
                .withMicroBatchGroupSize(3).withVariableSeqLengths(true);
        check("PP2xVP2 G3 variable", runWorld(1, 2, 2, config, 1), REFERENCES.get("5/true"), 1, 2, 2, config);
        ScheduleConfig flat = ScheduleConfig.of(4, ToyPipelineModel.ACTIVATION, DataType.FLOAT32).withVariableSeqLengths(true);
        check("PP4 variable", runWorld(1, 4, 1, flat, 1), REFERENCES.get("4/true"), 1, 4, 1, flat);
    }

    @Test
    void noPipeliningAccumulatesLikeOneBackwardOverAllMicroBatches() {
        for (int m : new int[] {4, 8}) {
            ScheduleConfig config = ScheduleConfig.of(m, ToyPipelineModel.ACTIVATION, DataType.FLOAT32);
            List<RankRun> runs = runWorld(1, 1, 1, config, 1);
            Reference loop = plainLoop(m);
            assertClose(loop.losses(), runs.get(0).result().losses(), "losses");
            loop.grads().forEach((k, v) -> assertClose(v, runs.get(0).grads().get(k), k));
        }
    }

    @Test
    void lossesLeftOnTheDeviceAreTheLossesAReadingRunReturns() {
        int pp = 2;
        ScheduleConfig train = ScheduleConfig.of(4, ToyPipelineModel.ACTIVATION, DataType.FLOAT32);
        Reference ref = REFERENCES.get("4/false");
        List<Object> checked = InJvmWorld.run(pp, Duration.ofSeconds(60), rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.of(pp, 1, pp));
            LayerAssignment assignment = LayerAssignment.even(ToyPipelineModel.LAYERS, pp, 1);
            try (ToyPipelineModel model = new ToyPipelineModel(rank.manager(), assignment, groups.pipelineRank(), null, false)) {
                ScheduleResult kept = Schedules.forwardBackward(model::forward, 1, groups, rank.manager(),
                        train.withLossesOnDevice(true));
                assertEquals(0, kept.losses().length, "losses left on the device are not also read");
                assertFalse(kept.hasLosses());
                // the weights do not change between the runs (no optimizer): a reading run gives the same losses
                ScheduleResult read = Schedules.forwardBackward(model::forward, 1, groups, rank.manager(), train);
                if (groups.isLastStage()) {
                    try (NDArray losses = kept.deviceLosses()) {
                        assertSame(rank.manager(), losses.getManager());
                        assertEquals(DataType.FLOAT32, losses.getDataType());
                        assertClose(ref.losses(), losses.toFloatArray(), "losses left on the device");
                        assertArrayEquals(read.losses(), losses.toFloatArray(), 0f);
                        assertEquals(read.meanLoss(), ScheduleResult.meanOf(losses.toFloatArray()));
                    }
                } else {
                    assertNull(kept.deviceLosses());
                }
            }
            return null;
        });
        assertEquals(pp, checked.size());
    }

    @Test
    void forwardOnlyReturnsTrainingLossesAndLeavesGradientsAlone() {
        for (int[] layout : new int[][] {{2, 1}, {2, 2}, {4, 1}}) {
            int pp = layout[0];
            int vp = layout[1];
            ScheduleConfig train = ScheduleConfig.of(8, ToyPipelineModel.ACTIVATION, DataType.FLOAT32);
            Reference ref = REFERENCES.get("8/false");
            List<Object> checked = InJvmWorld.run(pp, Duration.ofSeconds(60), rank -> {
                ProcessGroups groups = rank.groups(ParallelDims.of(pp, 1, pp));
                LayerAssignment assignment = LayerAssignment.even(ToyPipelineModel.LAYERS, pp, vp);
                try (ToyPipelineModel model = new ToyPipelineModel(rank.manager(), assignment, groups.pipelineRank(), null, false)) {
                    ScheduleResult eval = Schedules.forwardBackward(model::forward, vp, groups, rank.manager(),
                            train.withForwardOnly(true));
                    model.gradients().forEach((k, g) -> assertNull(g, "forward-only wrote a gradient into " + k));
                    if (groups.isLastStage()) {
                        assertClose(ref.losses(), eval.losses(), "forward-only losses");
                    } else {
                        assertEquals(0, eval.losses().length);
                    }
                    ScheduleResult trained = Schedules.forwardBackward(model::forward, vp, groups, rank.manager(), train);
                    assertArrayEquals(trained.losses(), eval.losses(), 0f, "forward-only and training losses differ");
                    Map<String, float[]> before = model.gradients();
                    ScheduleResult again = Schedules.forwardBackward(model::forward, vp, groups, rank.manager(),
                            train.withForwardOnly(true));
                    assertArrayEquals(trained.losses(), again.losses(), 0f);
                    Map<String, float[]> after = model.gradients();
                    before.forEach((k, g) -> {
                        assertNotNull(g, k);
                        assertArrayEquals(g, after.get(k), 0f, "forward-only changed the gradient of " + k);
                    });
                }
                return null;
            });
            assertEquals(pp, checked.size());
        }
    }

    /** Runs the toy model on {@code tp * pp} in-JVM ranks, {@code repeats} steps; reports the last. */
    static List<RankRun> runWorld(int tp, int pp, int vp, ScheduleConfig config, int repeats) {
        int world = tp * pp;
        return InJvmWorld.run(world, Duration.ofSeconds(60), rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.of(world, tp, pp));
            LayerAssignment assignment = LayerAssignment.even(ToyPipelineModel.LAYERS, pp, vp);
            try (ToyPipelineModel model = new ToyPipelineModel(rank.manager(), assignment, groups.pipelineRank(),
                    tp > 1 ? groups.tp() : null, config.variableSeqLengths())) {
                ScheduleResult result = null;
                for (int i = 0; i < repeats; i++) {
                    result = Schedules.forwardBackward(model::forward, vp, groups, rank.manager(), config);
                }
                int warmup = Schedules.table(vp, pp, config).warmup(groups.pipelineRank());
                return new RankRun(groups.pipelineRank(), groups.tensorParallelRank(), warmup, result,
                        model.gradients(), model.forwardCalls());
            }
        });
    }

    private static void check(String name, List<RankRun> runs, Reference ref, int tp, int pp, int vp, ScheduleConfig config) {
        ScheduleTable table = Schedules.table(vp, pp, config);
        int gradsSeen = 0;
        for (RankRun run : runs) {
            String where = name + " M=" + config.numMicrobatches() + " stage " + run.stage() + " tp " + run.tpRank();
            if (run.stage() == pp - 1) {
                assertClose(ref.losses(), run.result().losses(), where + " losses");
            } else {
                assertEquals(0, run.result().losses().length, where);
            }
            assertTrue(run.result().peakLiveMicroBatches() <= run.warmup() + 1,
                    where + ": " + run.result().peakLiveMicroBatches() + " live micro-batches, warmup " + run.warmup());
            List<VirtualMicroBatch> expectedCalls = new ArrayList<>(table.forwardOrder());
            assertEquals(expectedCalls, run.forwardCalls(), where + " forward order");
            for (Map.Entry<String, float[]> e : run.grads().entrySet()) {
                float[] full = ref.grads().get(e.getKey());
                float[] expected = slice(e.getKey(), full, tp, run.tpRank());
                assertNotNull(e.getValue(), where + " has no gradient for " + e.getKey());
                assertClose(expected, e.getValue(), where + " gradient of " + e.getKey());
                gradsSeen++;
            }
        }
        // every rank holds 8 / (pp * vp) layers per chunk, 4 parameters each
        assertEquals(ToyPipelineModel.LAYERS * 4 * tp, gradsSeen, name + ": gradients compared");
    }

    /**
     * Fails unless {@code max |actual - expected| <= 1e-5 * max(1, max |expected|)}: 1e-5 absolute
     * for values up to 1, relative above (float32 sums in a different order differ in the last bits).
     */
    static void assertClose(float[] expected, float[] actual, String what) {
        assertEquals(expected.length, actual.length, what + ": lengths");
        double scale = 1;
        double diff = 0;
        for (int i = 0; i < expected.length; i++) {
            scale = Math.max(scale, Math.abs(expected[i]));
            diff = Math.max(diff, Math.abs((double) actual[i] - expected[i]));
        }
        assertTrue(diff <= TOLERANCE * scale, what + ": max |difference| " + diff + " > " + TOLERANCE + " x " + scale);
    }

    /** This tensor-parallel rank's part of a full gradient: W1/b1 by rows, W2 by columns, b2 whole. */
    static float[] slice(String key, float[] full, int tp, int tpRank) {
        if (tp == 1 || key.endsWith(".b2")) {
            return full;
        }
        if (key.endsWith(".w1") || key.endsWith(".b1")) {
            int per = full.length / tp;
            float[] out = new float[per];
            System.arraycopy(full, tpRank * per, out, 0, per);
            return out;
        }
        int cols = ToyPipelineModel.FFN / tp;
        float[] out = new float[ToyPipelineModel.HIDDEN * cols];
        for (int row = 0; row < ToyPipelineModel.HIDDEN; row++) {
            System.arraycopy(full, row * ToyPipelineModel.FFN + tpRank * cols, out, row * cols, cols);
        }
        return out;
    }

    /** The serial model (one rank, no pipelining) through {@link Schedules}. */
    private static Reference reference(int m, boolean variable) {
        ScheduleConfig config = ScheduleConfig.of(m, ToyPipelineModel.ACTIVATION, DataType.FLOAT32).withVariableSeqLengths(variable);
        RankRun run = runWorld(1, 1, 1, config, 1).get(0);
        return new Reference(run.result().losses(), run.grads());
    }

    /** The serial model in one scope: sum of losses / M, one backward. Independent of the schedule code. */
    private static Reference plainLoop(int m) {
        return InJvmWorld.run(1, rank -> {
            LayerAssignment all = LayerAssignment.even(ToyPipelineModel.LAYERS, 1, 1);
            try (ToyPipelineModel model = new ToyPipelineModel(rank.manager(), all, 0, null, false);
                 AutogradScope scope = AutogradScope.open(rank.manager())) {
                NDManager sm = scope.manager();
                float[] losses = new float[m];
                NDArray total = null;
                for (int mb = 0; mb < m; mb++) {
                    NDArray x = model.layers(scope, all.layers(0, 0), ToyPipelineModel.data(sm, mb, false));
                    NDArray loss = ToyPipelineModel.loss(sm, x, mb, false);
                    losses[mb] = loss.toFloatArray()[0];
                    total = total == null ? loss : total.add(loss);
                }
                scope.backward(total.div(m));
                Map<String, float[]> grads = new HashMap<>();
                try (NDManager temp = rank.manager().newSubManager()) {
                    model.weights().forEach((k, v) -> grads.put(k, Tensors.gradientOrNull(v, temp).toFloatArray()));
                }
                return new Reference(losses, grads);
            }
        }).get(0);
    }
}
