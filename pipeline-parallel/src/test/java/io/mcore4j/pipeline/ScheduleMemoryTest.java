package io.mcore4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.types.DataType;
import ai.djl.pytorch.jni.JniUtils;
import io.mcore4j.core.testing.NativeArrays;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.time.Duration;
import java.util.List;

import org.junit.jupiter.api.Test;

/** Activation memory: open scopes stay within warmup + 1, and every run releases what it created. */
class ScheduleMemoryTest {

    @Test
    void oneFOneBHoldsAtMostWarmupPlusOneMicroBatchesAndLeaksNothing() {
        checkRuns(4, 1, ScheduleConfig.of(8, ToyPipelineModel.ACTIVATION, DataType.FLOAT32));
    }

    @Test
    void interleavedAndForwardOnlyRunsLeakNothing() {
        checkRuns(2, 2, ScheduleConfig.of(4, ToyPipelineModel.ACTIVATION, DataType.FLOAT32));
        checkRuns(2, 2, ScheduleConfig.of(4, ToyPipelineModel.ACTIVATION, DataType.FLOAT32).withForwardOnly(true));
        checkRuns(2, 1, ScheduleConfig.of(5, ToyPipelineModel.ACTIVATION, DataType.FLOAT32).withVariableSeqLengths(true));
    }

    @Test
    void aFailingForwardStepStillReleasesEveryScope() {
        ScheduleConfig config = ScheduleConfig.of(4, ToyPipelineModel.ACTIVATION, DataType.FLOAT32);
        InJvmWorld.run(1, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.of(1, 1, 1));
            LayerAssignment assignment = LayerAssignment.even(ToyPipelineModel.LAYERS, 1, 1);
            try (ToyPipelineModel model = new ToyPipelineModel(rank.manager(), assignment, 0, null, false)) {
                boolean gradMode = JniUtils.isGradMode();
                int baseline = NativeArrays.live(rank.manager());
                IllegalStateException e = assertThrows(IllegalStateException.class, () -> Schedules.forwardBackward(
                        (scope, chunk, mb, input) -> {
                            if (mb == 2) {
                                throw new IllegalStateException("bad batch " + mb);
                            }
                            return model.forward(scope, chunk, mb, input);
                        }, 1, groups, rank.manager(), config));
                assertEquals("bad batch 2", e.getMessage());
                assertEquals(baseline, NativeArrays.live(rank.manager()), "a failed run left native arrays behind");
                assertEquals(gradMode, JniUtils.isGradMode(), "grad mode not restored");
            }
            return null;
        });
    }

    private static void checkRuns(int pp, int vp, ScheduleConfig config) {
        ScheduleTable table = Schedules.table(vp, pp, config);
        StagePlan plan = Schedules.plan(vp, pp, config);
        List<int[]> peaks = InJvmWorld.run(pp, Duration.ofSeconds(60), rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.of(pp, 1, pp));
            int stage = groups.pipelineRank();
            LayerAssignment assignment = LayerAssignment.even(ToyPipelineModel.LAYERS, pp, vp);
            try (ToyPipelineModel model = new ToyPipelineModel(rank.manager(), assignment, stage, null,
                    config.variableSeqLengths())) {
                int baseline = NativeArrays.live(rank.manager());
                int[] peak = new int[5];
                for (int i = 0; i < 5; i++) {
                    ScheduleResult r = Schedules.forwardBackward(model::forward, vp, groups, rank.manager(), config);
                    assertEquals(baseline, NativeArrays.live(rank.manager()),
                            "stage " + stage + " run " + i + ": live native arrays changed");
                    peak[i] = r.peakLiveMicroBatches();
                    assertEquals(plan.peakLiveMicroBatches(stage), peak[i], "stage " + stage + " peak vs plan");
                }
                return peak;
            }
        });
        for (int stage = 0; stage < pp; stage++) {
            for (int peak : peaks.get(stage)) {
                int bound = config.forwardOnly() ? 1 : table.warmup(stage) + 1;
                assertTrue(peak <= bound, table + " stage " + stage + ": " + peak + " live micro-batches > " + bound);
                assertTrue(peak >= 1);
            }
        }
    }
}
