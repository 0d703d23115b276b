package io.mcore4j.planner;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.models.GptConfigs;
import io.mcore4j.models.TransformerConfig.Recompute;

import org.junit.jupiter.api.Test;

/**
 * The memory model against the one-GPU figures (device memory in use as the driver reports it): the
 * 1.3B model at micro-batch 4 is what the H200 calibration's device overhead is fitted to; micro-batches
 * 2 and 8 and LLaMA-7B with selective recompute are predictions, checked against one H200 on 2026-11-24
 * ({@code scripts/gpu/planner-check.sh}: 28.0, 51.9 and 131.3 GiB in use).
 */
class OneGpuMemoryTest {
    private static final double GIB = 1L << 30;

    @Test
    void the1_3bFitAndTheLlama7bPrediction() {
        Calibration h200 = Calibration.builtIn("h200");
        MemoryEstimate gpt = MemoryModel.estimate(ReadmeFigures.gpt1_3b(4, 2, 1, true),
                ReadmeFigures.layout(1, 1, 1, 4, Recompute.NONE), h200);
        assertEquals(36.0, gpt.total() / GIB, 0.05, gpt.describe());
        for (int[] mbAndMeasured : new int[][] {{2, 280}, {8, 519}}) {
            int mb = mbAndMeasured[0];
            double measured = mbAndMeasured[1] / 10.0;
            MemoryEstimate e = MemoryModel.estimate(ReadmeFigures.gpt1_3b(mb, 8 / mb, 1, true),
                    ReadmeFigures.layout(1, 1, 1, mb, Recompute.NONE), h200);
            double error = e.total() / GIB / measured - 1;
            assertTrue(Math.abs(error) <= 0.10, "1.3B micro-batch " + mb + ": " + e.describe() + " against "
                    + measured + " GiB measured");
        }
        MemoryEstimate llama = MemoryModel.estimate(ReadmeFigures.workload(GptConfigs.llama7b(), 1, 4, 1, true),
                ReadmeFigures.layout(1, 1, 1, 1, Recompute.SELECTIVE), h200);
        double error = llama.total() / GIB / 131.3 - 1;
        assertTrue(Math.abs(error) <= 0.10, "LLaMA-7B: " + llama.describe() + " against 131.3 GiB measured");
    }
}
