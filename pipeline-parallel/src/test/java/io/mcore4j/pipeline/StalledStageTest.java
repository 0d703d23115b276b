package io.mcore4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.testing.NativeArrays;
import io.mcore4j.parallel.CommunicationException;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.time.Duration;

import org.junit.jupiter.api.Test;

/** A neighbour that never sends: the waiting stage fails with the timeout, naming itself and the micro-batch. */
class StalledStageTest {

    @Test
    void stageWaitingForAnActivationNamesItself() {
        CommunicationException e = stall(0);
        assertTrue(e.getMessage().contains("pipeline stage 1 of 2 (micro-batch 0)"), e.getMessage());
        assertTrue(e.getMessage().contains("receiving an activation from stage 0"), e.getMessage());
        assertTrue(e.getMessage().contains("timed out"), e.getMessage());
    }

    @Test
    void stageWaitingForAGradientNamesItself() {
        CommunicationException e = stall(1);
        assertTrue(e.getMessage().contains("pipeline stage 0 of 2 (micro-batch 0)"), e.getMessage());
        assertTrue(e.getMessage().contains("receiving a gradient"), e.getMessage());
    }

    /** Runs PP2 where {@code stalled} never communicates; returns the other stage's failure. */
    private static CommunicationException stall(int stalled) {
        ScheduleConfig config = ScheduleConfig.of(4, ToyPipelineModel.ACTIVATION, DataType.FLOAT32);
        InJvmWorld.RankFailedException failure = assertThrows(InJvmWorld.RankFailedException.class, () ->
                InJvmWorld.run(2, Duration.ofSeconds(1), rank -> {
                    ProcessGroups groups = rank.groups(ParallelDims.of(2, 1, 2));
                    if (groups.pipelineRank() == stalled) {
                        Thread.sleep(2500);
                        return null;
                    }
                    LayerAssignment assignment = LayerAssignment.even(ToyPipelineModel.LAYERS, 2, 1);
                    try (ToyPipelineModel model = new ToyPipelineModel(rank.manager(), assignment, groups.pipelineRank(),
                            null, false)) {
                        int baseline = NativeArrays.live(rank.manager());
                        try {
                            return Schedules.forwardBackward(model::forward, 1, groups, rank.manager(), config);
                        } finally {
                            // a failed run still closes every micro-batch scope
                            if (NativeArrays.live(rank.manager()) != baseline) {
                                throw new AssertionError("failed run left " + (NativeArrays.live(rank.manager()) - baseline)
                                        + " native arrays");
                            }
                        }
                    }
                }));
        assertTrue(failure.rank() != stalled, "the stalled rank did not fail: " + failure);
        return assertInstanceOf(CommunicationException.class, failure.getCause());
    }
}
