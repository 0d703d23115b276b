package io.mcore4j.planner;

import io.mcore4j.models.TransformerConfig;
import io.mcore4j.optimizer.OptimizerConfig;
import io.mcore4j.parallel.ParallelDims;

import java.util.List;

/**
 * Per-rank memory of a layout. Parameters come from {@link ParameterInventory} (the shapes the
 * model builds); optimizer state and gradient buffers follow the optimizer module's layout: one
 * float32 master copy plus the update rule's state per parameter (Adam/AdamW two moments, SGD with
 * momentum one), in buckets padded to a multiple of the reduction group and sharded over it with
 * the distributed optimizer (dense parameters over DP x CP, expert parameters over expert-DP);
 * the reduction buffer has the gradient dtype (float32 unless
 * {@code --no-accumulate-allreduce-grads-in-fp32}); activations from {@link ActivationModel}. Under
 * {@link OptimizerConfig#optimizerCpuOffload()} the fraction {@code optimizerOffloadFraction} of the
 * optimizer state leaves device memory (the optimizer moves whole bucket shards and so moves at least
 * that much: the device share estimated is an upper bound); the gradients, their buffers and the
 * step's workspace stay on the device. FP8 linears ({@link TransformerConfig#fp8()}) keep a float8 copy of their
 * weight and its transpose: 2 more bytes per FP8 weight element, counted with the parameters.
 */
public final class MemoryModel {
    private MemoryModel() {}

    /**
     * The peak of the rank with the highest peak.
     *
     * @param w the workload
     * @param layout the layout
     * @param cal the device's memory constants (overhead, optimizer workspace)
     * @return the estimate
     */
    public static MemoryEstimate estimate(Workload w, Layout layout, Calibration cal) {
        MemoryEstimate worst = null;
        for (int stage = 0; stage < layout.pipelineParallel(); stage++) {
            MemoryEstimate e = stage(w, layout, stage, cal);
            if (worst == null || e.total() > worst.total()) {
                worst = e;
            }
        }
        return worst;
    }

    /**
     * The peak of one pipeline rank.
     *
     * @param w the workload
     * @param layout the layout
     * @param stage the pipeline rank
     * @param cal the device's memory constants
     * @return the estimate
     */
    public static MemoryEstimate stage(Workload w, Layout layout, int stage, Calibration cal) {
        TransformerConfig c = w.modelFor(layout);
        OptimizerConfig opt = w.optimizerFor(layout);
        ParallelDims dims = layout.dims();
        List<ParameterInventory.Tensor> tensors = ParameterInventory.stage(c, layout, stage);
        long dense = ParameterInventory.numel(tensors, false);
        long expert = ParameterInventory.numel(tensors, true);
        int bytes = c.dtype().getNumOfBytes();
        long params = (dense + expert) * bytes;
        long fp8Copies = 0;
        for (ParameterInventory.Tensor t : tensors) {
            fp8Copies += ParameterInventory.fp8Weight(c, t) ? 2 * t.numel() : 0;
        }
        int denseGroup = dims.dataParallel() * dims.contextParallel();
        int expertGroup = dims.expertDataParallel();
        boolean shard = opt.useDistributedOptimizer();
        long denseShard = shard ? ceilDiv(dense, denseGroup) : dense;
        long expertShard = shard ? ceilDiv(expert, expertGroup) : expert;
        long state = (denseShard + expertShard) * 4L * (1 + stateTensors(opt));
        long onHost = opt.optimizerCpuOffload() ? (long) Math.floor(opt.optimizerOffloadFraction() * state) : 0;
        long optimizer = state - onHost;
        int gradBytes = opt.gradReduceInFp32() ? 4 : bytes;
        long buffers = (denseShard + expertShard) * gradBytes;
        if (shard && (denseGroup > 1 || expertGroup > 1)) {
            buffers += Math.min(opt.bucketSizeBytes(), (dense + expert) * (long) gradBytes); // the bucket being scattered
        }
        ActivationModel act = new ActivationModel(c, layout.tensorParallel(), layout.contextParallel(),
                layout.contextParallel() > 1 ? w.attention().fusedUnderContextParallel(c) : w.attention().isFused(c));
        int b = layout.microBatchSize();
        int s = w.seqLength();
        long m = layout.microBatches(w.globalBatchSize());
        int layersPerChunk = c.numLayers() / (layout.pipelineParallel() * layout.virtualStages());
        double perChunk = act.perChunk(b, s, layersPerChunk);
        double chunksInFlight = chunksInFlight(layout, stage, m);
        double input = act.stageInput(b, s) + (stage == 0 ? act.embedding(b, s) : 0);
        double perMicroBatch = layout.virtualStages() * perChunk + input;
        double kept = chunksInFlight * (perChunk + input);
        boolean last = stage == layout.pipelineParallel() - 1;
        double peak = kept + Math.max(act.backwardTransient(b, s, layersPerChunk), last ? act.logits(b, s) : 0);
        long workspace = (long) ((denseShard + expertShard) * cal.optimizerWorkspaceBytesPerParameter());
        return new MemoryEstimate(stage, params + fp8Copies, params, optimizer, onHost, (long) perMicroBatch,
                chunksInFlight / layout.virtualStages(), (long) peak, params, buffers, workspace,
                cal.deviceOverheadBytes());
    }

    /**
     * Model chunks whose activations a pipeline rank holds at once: 1F1B warms up with
     * {@code PP - stage - 1} forwards before its first backward; the interleaved schedule with
     * {@code (PP - stage - 1) x 2 + (VP - 1) x PP} (Megatron-Core's warm-up counts); never more
     * than the step's {@code m x VP} chunks.
     */
    static double chunksInFlight(Layout layout, int stage, long microBatches) {
        int pp = layout.pipelineParallel();
        int vp = layout.virtualStages();
        long warmup = vp == 1 ? pp - stage - 1 : (long) (pp - stage - 1) * 2 + (long) (vp - 1) * pp;
        return Math.min(warmup + 1, microBatches * vp);
    }

    private static int stateTensors(OptimizerConfig opt) {
        return switch (opt.algorithm()) {
            case ADAM, ADAMW -> 2;
            case SGD -> opt.sgdMomentum() > 0 ? 1 : 0;
        };
    }

    private static long ceilDiv(long a, long b) {
        return (a + b - 1) / b;
    }
}
