package io.mcore4j.planner;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.fp8.Fp8Config;
import io.mcore4j.core.fp8.Fp8Format;
import io.mcore4j.models.GptConfigs;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.TransformerConfig.Recompute;
import org.junit.jupiter.api.Test;

/**
 * The planner's FP8 (issue 35): the FP8 linears' GEMMs at twice the bf16 rate, and their float8 weight copies (the
 * weight and its transpose, 2 bytes a weight element) in the parameters' memory; the layers kept in bf16 count as bf16.
 */
class Fp8PlanTest {
    private static final Calibration H100 = Calibration.builtIn("h100");

    @Test
    void fp8LinearsRunFasterAndKeepTheirFloat8Copies() {
        TransformerConfig bf16 = GptConfigs.gpt1_3b().toBuilder().dtype(DataType.BFLOAT16).build();
        Layout tp1 = ReadmeFigures.layout(1, 1, 1, 4, Recompute.NONE);
        ClusterSpec h100 = ClusterSpec.h100(1, 1);
        Workload base = ReadmeFigures.workload(bf16, 4, 2, 1, true);
        Workload fp8 = ReadmeFigures.workload(bf16.toBuilder().fp8(Fp8Config.of(Fp8Format.HYBRID)).build(), 4, 2, 1, true);
        Workload fp8Ends = ReadmeFigures.workload(bf16.toBuilder().fp8(Fp8Config.of(Fp8Format.HYBRID)
                .withBf16Layers(1, 1)).build(), 4, 2, 1, true);

        double t0 = TimeModel.estimate(base, tp1, h100, H100).tokensPerSecondPerGpu();
        double t1 = TimeModel.estimate(fp8, tp1, h100, H100).tokensPerSecondPerGpu();
        double t2 = TimeModel.estimate(fp8Ends, tp1, h100, H100).tokensPerSecondPerGpu();
        assertTrue(t1 > 1.3 * t0 && t1 < 2 * t0, "FP8 " + t1 + " vs bf16 " + t0 + " tokens/s");
        assertTrue(t2 > t0 && t2 < t1, "two layers in bf16: " + t2 + " between " + t0 + " and " + t1);

        // 24 layers of h=2048, FFN 8192: QKV 3h^2 + proj h^2 + FC1 and FC2 2 x 4h^2 = 12 h^2 weight elements a layer
        long perLayer = 12L * 2048 * 2048;
        long p0 = MemoryModel.estimate(base, tp1, H100).parameters();
        assertEquals(2 * 24 * perLayer, MemoryModel.estimate(fp8, tp1, H100).parameters() - p0);
        assertEquals(2 * 22 * perLayer, MemoryModel.estimate(fp8Ends, tp1, H100).parameters() - p0);
        // the optimizer's state is the parameters', not the copies'
        assertEquals(MemoryModel.estimate(base, tp1, H100).optimizerState(), MemoryModel.estimate(fp8, tp1, H100).optimizerState());

        // ZeRO-3 gathers three layers at a time, but every FP8 linear keeps its cached float8 copies (Fp8Linear's cache)
        Workload base4 = ReadmeFigures.workload(bf16, 4, 2, 4, true);
        Workload fp84 = ReadmeFigures.workload(fp8.model(), 4, 2, 4, true);
        Layout zero3 = new Layout(1, 1, 1, 4, 1, 1, 4, Recompute.NONE, true)
                .withSharding(io.mcore4j.optimizer.DataParallelShardingStrategy.OPTIM_GRADS_PARAMS);
        assertEquals(2 * 24 * perLayer, MemoryModel.estimate(fp84, zero3, H100).parameters()
                - MemoryModel.estimate(base4, zero3, H100).parameters());
    }
}
