package io.mcore4j.planner;

import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.Precision;
import io.mcore4j.models.GptConfigs;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.TransformerConfig.Recompute;
import io.mcore4j.models.transformer.AttentionBackend;
import io.mcore4j.optimizer.OptimizerConfig;

/** The runs docs/benchmarks.md (formerly the README) and the issue quote, as workloads and layouts (fp16, fused Adam, seq 2048). */
final class ReadmeFigures {
    private ReadmeFigures() {}

    /**
     * @param model the model
     * @param microBatch micro-batch size
     * @param microBatches micro-batches per data-parallel replica
     * @param dp data-parallel size
     * @param fp32Reduce whether gradients are reduced in float32 (the default; the DP rows turned it off)
     * @return the workload
     */
    static Workload workload(TransformerConfig model, int microBatch, int microBatches, int dp, boolean fp32Reduce) {
        return workload(model, 2048, microBatch, microBatches, dp, fp32Reduce);
    }

    static Workload workload(TransformerConfig model, int seq, int microBatch, int microBatches, int dp, boolean fp32Reduce) {
        OptimizerConfig opt = OptimizerConfig.builder().precision(Precision.of(model.dtype() == DataType.FLOAT16,
                model.dtype() == DataType.BFLOAT16)).gradReduceInFp32(fp32Reduce).build();
        return new Workload(model, seq, (long) microBatch * microBatches * dp, 128, opt, AttentionBackend.AUTO);
    }

    static Workload gpt1_3b(int microBatch, int microBatches, int dp, boolean fp32Reduce) {
        return workload(GptConfigs.gpt1_3b(), microBatch, microBatches, dp, fp32Reduce);
    }

    static Layout layout(int tp, int pp, int dp, int microBatch, Recompute recompute) {
        return new Layout(tp, pp, 1, dp, 1, 1, microBatch, recompute, false);
    }
}
