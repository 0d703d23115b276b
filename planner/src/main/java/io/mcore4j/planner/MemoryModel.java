package io.mcore4j.planner;

import io.mcore4j.models.TransformerConfig;
import io.mcore4j.optimizer.DataParallelShardingStrategy;
import io.mcore4j.optimizer.DistributedDataParallel;
import io.mcore4j.optimizer.OptimizerConfig;
import io.mcore4j.parallel.ParallelDims;

import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

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
 *
 * <p>Megatron FSDP ({@link OptimizerConfig#dataParallelShardingStrategy()}): {@code optim} is the
 * distributed optimizer above. {@code optim_grads} (ZeRO-2) keeps whole {@code .grad}s only for the
 * bucket backward is filling and the weights backward does not report per pass (the embedding; and
 * without ZeRO-3 the layers full recompute checkpoints, with the head after a checkpointed last layer:
 * ZeRO-2 with uniform full recompute keeps every gradient whole); beside the shards' running sum the
 * two per-pass reductions in flight hold one flat buffer each, as large as the largest bucket (the
 * bucket size less one element plus the largest layer tensor, as buckets close once full); all of it
 * lives through backward. {@code optim_grads_params} (ZeRO-3) adds sharded weights: only the master shards hold them
 * between uses, so the parameters on the device are the weights outside the layers (never released)
 * and three layers' gathered weights (the one in use and the two prefetched); the FP8 copies stay whole, since
 * each FP8 linear caches its weight's float8 copy and transpose for the step's weights
 * ({@code io.mcore4j.core.fp8.Fp8Linear}'s weight cache), whether the weight is gathered or not. Its recompute
 * is the layout's: a layer that keeps its graph (none, selective, or outside a {@code block} of full recompute;
 * only where the device frees weights in place, {@link SearchSpace#freesWeightsInPlace()}) keeps its activations
 * as under the distributed optimizer, and the weights its graph saved are views of the freed buffer, gathered
 * again for its backward, so they add nothing; backward reports every layer, recomputed or not, so the whole
 * {@code .grad}s are ZeRO-2's without recompute.
 */
public final class MemoryModel {
    private static final Pattern LAYER = Pattern.compile("decoder\\.layers\\.\\d+\\.");

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
        long gradients = params;
        long buffers = (denseShard + expertShard) * gradBytes;
        DataParallelShardingStrategy sharding = opt.dataParallelShardingStrategy();
        if (sharding.shardsGradients()) {
            Sharded z = Sharded.of(tensors, opt.bucketSizeBytes() / gradBytes);
            // whole .grads: those backward does not report (see the class comment) and the bucket being filled;
            // flat buffers: the shards' running sum and the reductions of the last two reports (a layer each) in flight
            gradients = (unreported(c, layout, z) + z.bucket()) * bytes;
            buffers += DistributedDataParallel.REPORTS_IN_FLIGHT * Math.max(z.bucket(), z.largestLayer()) * gradBytes;
            if (sharding.shardsParameters()) {
                // the weights outside the layers are never released; of the layers' only the one in use and the
                // two prefetched are whole (the FP8 linears' cached copies are all kept)
                long gathered = z.embedding() + z.head() + Math.min(3, z.layers()) * z.largestLayer();
                params = gathered * bytes;
            }
        } else if (shard && (denseGroup > 1 || expertGroup > 1)) {
            buffers += Math.min(opt.bucketSizeBytes(), (dense + expert) * (long) gradBytes); // the bucket being scattered
        }
        ActivationModel act = new ActivationModel(c, layout.tensorParallel(), layout.contextParallel(),
                layout.expertParallel(), layout.contextParallel() > 1 ? w.attention().fusedUnderContextParallel(c) : w.attention().isFused(c));
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
        long gradientsAtPeak = sharding.shardsGradients() ? gradients + buffers : gradients;
        return new MemoryEstimate(stage, params + fp8Copies, gradients, optimizer, onHost, (long) perMicroBatch,
                chunksInFlight / layout.virtualStages(), (long) peak, gradientsAtPeak, buffers, workspace,
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

    /**
     * Elements whose gradients backward does not report to the per-pass reduction, so that they stay whole
     * until the step's sync ({@code GptModel.addGradientReadyListener}): the embedding's always; without
     * ZeRO-3's residency also the layers full recompute checkpoints and, after a checkpointed last layer,
     * the final norm's and output layer's.
     */
    private static long unreported(TransformerConfig c, Layout layout, Sharded z) {
        if (layout.sharding().shardsParameters() || c.recompute() != TransformerConfig.Recompute.FULL) {
            return z.embedding();
        }
        int perChunk = c.numLayers() / (layout.pipelineParallel() * layout.virtualStages());
        double share = TimeModel.recomputedShare(c, perChunk);
        return z.embedding() + (long) Math.ceil(share * z.inLayers()) + (share == 1 ? z.head() : 0);
    }

    /**
     * A rank's weights as Megatron FSDP buckets them: the embedding's, the transformer layers' (by layer)
     * and the head's (final norm, output layer).
     *
     * @param embedding elements of the embedding
     * @param head elements after the layers
     * @param inLayers elements of the layers
     * @param layers layers on the rank
     * @param largestLayer elements of the largest layer
     * @param bucket elements of the largest gradient bucket: a bucket closes once it holds the bucket size, so
     *     at most that less one element plus one layer tensor, never more than the layers hold
     */
    record Sharded(long embedding, long head, long inLayers, int layers, long largestLayer, long bucket) {
        static Sharded of(List<ParameterInventory.Tensor> tensors, long bucketNumel) {
            Map<String, Long> byLayer = new HashMap<>();
            long embedding = 0;
            long head = 0;
            long inLayers = 0;
            long largestTensor = 0;
            for (ParameterInventory.Tensor t : tensors) {
                Matcher m = LAYER.matcher(t.key());
                if (m.lookingAt()) {
                    byLayer.merge(m.group(), t.numel(), Long::sum);
                    inLayers += t.numel();
                    largestTensor = Math.max(largestTensor, t.numel());
                } else if (t.key().startsWith("embedding.")) {
                    embedding += t.numel();
                } else {
                    head += t.numel();
                }
            }
            long largestLayer = byLayer.values().stream().mapToLong(Long::longValue).max().orElse(0);
            return new Sharded(embedding, head, inLayers, byLayer.size(), largestLayer,
                    Math.min(inLayers, Math.max(0, bucketNumel - 1) + largestTensor));
        }
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
