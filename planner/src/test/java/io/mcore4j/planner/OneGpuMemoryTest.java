package io.mcore4j.planner;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.models.GptConfigs;
import io.mcore4j.models.TransformerConfig.Recompute;

import org.junit.jupiter.api.Test;

/**
 * The memory model against the one-GPU figures (device memory in use as the driver reports it): the
 * 1.3B model at micro-batch 4 is what the H200 calibration's device overhead is fitted to; LLaMA-7B
 * with selective recompute (136.8 GiB measured) is a prediction. The lead's GPU runs add the 1.3B
 * model at another micro-batch size (the commands are in the planner's section of the README).
 */
class OneGpuMemoryTest {
    private static final double GIB = 1L << 30;

    @Test
    void the1_3bFitAndTheLlama7bPrediction() {
        Calibration h200 = Calibration.builtIn("h200");
        MemoryEstimate gpt = MemoryModel.estimate(ReadmeFigures.gpt1_3b(4, 2, 1, true),
                ReadmeFigures.layout(1, 1, 1, 4, Recompute.NONE), h200);
        assertEquals(36.0, gpt.total() / GIB, 0.05, gpt.describe());
        MemoryEstimate llama = MemoryModel.estimate(ReadmeFigures.workload(GptConfigs.llama7b(), 1, 4, 1, true),
                ReadmeFigures.layout(1, 1, 1, 1, Recompute.SELECTIVE), h200);
        double error = llama.total() / GIB / 136.8 - 1;
        assertTrue(Math.abs(error) <= 0.10, "LLaMA-7B: " + llama.describe() + " against 136.8 GiB measured");
    }
}
