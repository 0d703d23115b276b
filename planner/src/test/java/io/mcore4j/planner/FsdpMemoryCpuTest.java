package io.mcore4j.planner;

import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.TransformerConfig.Recompute;
import io.mcore4j.models.TransformerConfig.RecomputeMethod;
import io.mcore4j.optimizer.DataParallelShardingStrategy;

import java.util.Locale;

import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

/**
 * Issue 36's acceptance on the CPU: a ZeRO-3 ({@code optim_grads_params}) rank's native peak is below a data-parallel
 * rank's by at least the share the memory model expects. Both train the same GPT at DP4 on in-JVM ranks with every
 * layer recomputed (off a CUDA device ZeRO-3 recomputes every layer it releases, so plain data parallelism does too);
 * the process's native peak ({@link NativePeak}, as {@link MemoryModelCpuTest} measures it) counts the four ranks.
 * Linux only; elsewhere the test is skipped.
 *
 * <p>Figures of 2026-11-28: DP 497.1 MB measured, 497.4 estimated; ZeRO-3 221.6 MB measured, 295.7 estimated (55.4%
 * below DP measured, 40.6% estimated). The model's ZeRO-3 figure is high here: it counts every layer's whole gradient
 * as held at once under full recompute (its "grads so far"), which the run does not show.
 */
class FsdpMemoryCpuTest {
    private static final Calibration CPU = Calibration.builtIn("cpu");

    @Test
    void aZero3RankPeaksBelowADataParallelRankByAtLeastTheEstimatedShare() {
        Assumptions.assumeTrue(NativePeak.available(), "needs Linux's /proc/self counters and the pinned mmap threshold");
        TransformerConfig model = TransformerConfig.builder(4, 256, 4, 1024).ffnHiddenSize(1024).maxSequenceLength(128)
                .dropout(0, 0).build();
        Workload w = CpuProbe.workload(model, 128, 8, CpuProbe.fp32());
        Layout dp = new Layout(1, 1, 1, 4, 1, 1, 2, Recompute.FULL, RecomputeMethod.UNIFORM, 1, false);
        Layout zero3 = new Layout(1, 1, 1, 4, 1, 1, 2, Recompute.FULL, RecomputeMethod.UNIFORM, 1, true)
                .withSharding(DataParallelShardingStrategy.OPTIM_GRADS_PARAMS);
        long measuredDp = CpuProbe.measure(w, dp);
        long measuredZero3 = CpuProbe.measure(w, zero3);
        long estimatedDp = MemoryModel.estimate(w, dp, CPU).total() * 4;
        long estimatedZero3 = MemoryModel.estimate(w, zero3, CPU).total() * 4;
        double measuredShare = 1 - measuredZero3 / (double) measuredDp;
        double estimatedShare = 1 - estimatedZero3 / (double) estimatedDp;
        String report = String.format(Locale.ROOT, "DP4, four ranks: data parallel measured %.1f MB, estimated %.1f MB;"
                        + " ZeRO-3 measured %.1f MB, estimated %.1f MB; ZeRO-3 below by %.1f%% measured, %.1f%% estimated",
                measuredDp / 1e6, estimatedDp / 1e6, measuredZero3 / 1e6, estimatedZero3 / 1e6,
                100 * measuredShare, 100 * estimatedShare);
        System.out.println(report);
        assertTrue(estimatedShare > 0.3, report);
        assertTrue(measuredShare >= estimatedShare - 0.05, report);
    }
}
