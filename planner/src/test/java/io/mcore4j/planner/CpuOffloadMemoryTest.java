package io.mcore4j.planner;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.models.GptConfigs;
import io.mcore4j.models.TransformerConfig.Recompute;

import org.junit.jupiter.api.Test;

/**
 * The memory model under {@code --optimizer-cpu-offload}: the offloaded share of the optimizer state
 * leaves the device's peak and is reported as host memory, and on one H200 the memory it frees for
 * LLaMA-7B changes the layout the search picks (a larger micro-batch or less recompute).
 */
class CpuOffloadMemoryTest {
    private static final Calibration H200 = Calibration.builtIn("h200");

    private static Workload llama7b(boolean offload, double fraction) {
        Workload w = ReadmeFigures.workload(GptConfigs.llama7b(), 1, 4, 1, true);
        return new Workload(w.model(), w.seqLength(), w.globalBatchSize(), w.vocabDivisor(),
                w.optimizer().toBuilder().optimizerCpuOffload(offload).optimizerOffloadFraction(fraction).build(),
                w.attention());
    }

    @Test
    void theOffloadedShareOfTheOptimizerStateLeavesTheDevicePeak() {
        Layout layout = ReadmeFigures.layout(1, 1, 1, 1, Recompute.SELECTIVE);
        MemoryEstimate onDevice = MemoryModel.estimate(llama7b(false, 1.0), layout, H200);
        MemoryEstimate all = MemoryModel.estimate(llama7b(true, 1.0), layout, H200);
        MemoryEstimate half = MemoryModel.estimate(llama7b(true, 0.5), layout, H200);
        long state = onDevice.optimizerState();
        assertEquals(0, onDevice.optimizerStateOnHost());
        assertTrue(state > 60L << 30, "LLaMA-7B's masters and moments are about 75 GiB: " + onDevice.describe());

        assertEquals(0, all.optimizerState(), all.describe());
        assertEquals(state, all.optimizerStateOnHost());
        assertEquals(onDevice.total() - state, all.total(), "fraction 1.0 takes the whole state off the device");
        assertTrue(all.describe().contains("optimizer state on the host"), all.describe());

        assertEquals(state / 2, half.optimizerStateOnHost());
        assertEquals(state - state / 2, half.optimizerState());
        assertEquals(onDevice.total() - state / 2, half.total());
        // the rest of the peak is the same: gradients, buffers and activations stay on the device
        assertEquals(onDevice.activations(), all.activations());
        assertEquals(onDevice.gradientBuffers(), all.gradientBuffers());
    }

    @Test
    void onOneH200TheFreedMemoryBuysALargerMicroBatchOrLessRecompute() {
        ClusterSpec oneGpu = ClusterSpec.h200(1, 1);
        PlannedLayout without = new LayoutSearch(llama7b(false, 1.0), oneGpu, H200, SearchSpace.defaults()).best(1).get(0);
        PlannedLayout with = new LayoutSearch(llama7b(true, 1.0), oneGpu, H200, SearchSpace.defaults()).best(1).get(0);
        Layout a = without.layout();
        Layout b = with.layout();
        System.out.printf("LLaMA-7B on one H200: without offload %s (%s), with offload %s (%s)%n", a.name(),
                without.memory().describe(), b.name(), with.memory().describe());
        assertNotEquals(a, b, "offload should change the plan: " + a.name() + " " + without.memory().describe());
        assertTrue(b.microBatchSize() > a.microBatchSize() || b.recompute().ordinal() < a.recompute().ordinal(),
                "with offload " + b.name() + ", without " + a.name());
        // the layout chosen with offload does not fit without it
        MemoryEstimate sameLayoutOnDevice = MemoryModel.estimate(llama7b(false, 1.0), b, H200);
        assertFalse(sameLayoutOnDevice.total() <= oneGpu.gpuMemoryBytes(), b.name() + " without offload: "
                + sameLayoutOnDevice.describe());
    }
}
