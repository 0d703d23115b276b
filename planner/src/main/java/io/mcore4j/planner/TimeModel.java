package io.mcore4j.planner;

import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.transformer.RecomputeSegment;
import io.mcore4j.optimizer.DataParallelShardingStrategy;
import io.mcore4j.optimizer.OptimizerConfig;

import java.util.List;

/**
 * Step time of a layout from FLOPs, bytes and a {@link Calibration}.
 *
 * <ul>
 *   <li>compute: each stage's training FLOPs per micro-batch (Megatron's counting: {@code 6} per
 *       weight element and token, {@code 12·s·h} of attention per layer and token, recompute's
 *       extra forward of what it reruns: the layers full recompute checkpoints, selective recompute's
 *       core attention and MLPs) at the calibrated fraction of peak; tensor parallelism divides all but the
 *       calibrated serial share, context parallelism divides everything;</li>
 *   <li>TP: two all-reduces of a micro-batch's hidden states per layer in forward (nothing to
 *       overlap with), two in backward of which the calibrated share hides behind weight gradients;</li>
 *   <li>CP: the key/value ring or all-gather, calibrated exposed share; the all-to-alls of {@code a2a}
 *       and {@code a2a+p2p} (queries, keys and values in, outputs back, and their transposes in
 *       backward) wholly exposed, since attention waits for them; EP: dispatch and combine all-to-alls
 *       in forward and backward;</li>
 *   <li>pipeline: {@code (m + (PP - 1) / VP)} times the slowest stage's micro-batch time (1F1B's fill
 *       and drain), plus stage-to-stage transfers;</li>
 *   <li>DP: the all-reduce (or reduce-scatter and parameter all-gather) of the rank's gradients over
 *       DP x CP at the group's bus bandwidth, times the calibrated factor; optimizer: per parameter.
 *       Megatron FSDP: ZeRO-2 reduce-scatters every backward pass, ZeRO-3 also all-gathers the weights
 *       twice per pass (for forward, and again for backward, whether backward reruns the layer or, where the device
 *       frees weights in place, runs its kept graph) and not after the step. The last pass's
 *       reduce-scatter is exposed as the distributed optimizer's; the other collectives (times the
 *       calibrated factor) run on a second stream beside the {@code m} passes' compute and are exposed
 *       only where they outlast it; ZeRO-2 adds the distributed optimizer's gather of the updated weights, so
 *       it is never estimated faster than the distributed optimizer. Nor is ZeRO-3: its gathers beside compute
 *       are counted at least as long as the one gather they replace, the distributed optimizer's after the step
 *       (what collectives beside compute take from it is not modelled, and the measured runs shard at a cost:
 *       ZeRO-2 below the distributed optimizer, FSDP2 below DDP, docs/benchmarks.md), plus the first gather of
 *       a step (one layer's), which always waits. ZeRO-3's recompute is the layout's (none, selective or full),
 *       counted with compute.</li>
 *   <li>FP8 ({@link TransformerConfig#fp8()}): the GEMMs of the FP8 linears run at {@code FP8_GEMM_SPEEDUP} (2) times
 *       the bf16 rate (Hopper's dense FP8 peak over its bf16 peak); their casts are not counted, so the estimate is
 *       the gain's upper bound until a calibration measures it (scripts/gpu/fp8-check.sh prints the ratio).</li>
 * </ul>
 * A collective's time is {@code latency + bytes x 2(n-1)/n / busBandwidth} for an all-reduce,
 * {@code (n-1)/n} for a gather or scatter; a group spanning nodes gets the inter-node bandwidth.
 */
public final class TimeModel {
    /** FP8 GEMM throughput over bf16's at the same efficiency: H100's and H200's dense peaks, 1979 over 989 TFLOP/s. */
    static final double FP8_GEMM_SPEEDUP = 2.0;

    private TimeModel() {}

    /**
     * @param w the workload
     * @param layout the layout
     * @param cluster the cluster
     * @param cal the calibration
     * @return the estimate
     */
    public static TimeEstimate estimate(Workload w, Layout layout, ClusterSpec cluster, Calibration cal) {
        TransformerConfig c = w.modelFor(layout);
        OptimizerConfig opt = w.optimizerFor(layout);
        int tp = layout.tensorParallel();
        int cp = layout.contextParallel();
        int pp = layout.pipelineParallel();
        int vp = layout.virtualStages();
        int dp = layout.dataParallel();
        int ep = layout.expertParallel();
        int b = layout.microBatchSize();
        int s = w.seqLength();
        long m = layout.microBatches(w.globalBatchSize());
        int bytes = c.dtype().getNumOfBytes();
        double peak = cluster.peakTflops() * 1e12;
        double tokensPerRank = (double) b * s / cp;
        double efficiency = cal.efficiency(c.hiddenSize(), tokensPerRank, w.seqLength());
        double latency = cal.collectiveLatencySeconds();

        // the slowest stage's compute for one micro-batch
        double worstStage = 0;
        int worstLayers = 0;
        for (int stage = 0; stage < pp; stage++) {
            double flops = 0;
            int layers;
            for (ParameterInventory.Tensor t : ParameterInventory.stage(c, layout, stage)) {
                if (t.key().startsWith("embedding.")) {
                    continue; // a lookup (the output layer's use of a tied weight is counted below)
                }
                double perToken = isMatrix(t) ? 6.0 * t.numel() * tp : 0;
                if (ParameterInventory.fp8Weight(c, t)) {
                    perToken /= FP8_GEMM_SPEEDUP; // the same FLOPs at the FP8 rate
                }
                if (t.expert()) {
                    perToken *= (double) c.moe().topK() * ep / c.moe().numExperts();
                }
                flops += perToken;
            }
            boolean last = stage == pp - 1;
            if (last && c.tiedEmbeddings()) {
                flops += 6.0 * c.hiddenSize() * c.vocabSize();
            }
            layers = c.numLayers() / pp;
            double attention = 12.0 * s * c.numAttentionHeads() * c.kvChannels();
            flops += layers * attention;
            // recompute: one more forward of what is recomputed (a third of forward + backward)
            double recomputed = switch (c.recompute()) {
                case NONE -> 0;
                case SELECTIVE -> layers * ((c.recomputes(TransformerConfig.RecomputeModule.CORE_ATTN) ? attention : 0)
                        + (recomputesMlp(c) ? mlpFlops(c) : 0)) / 3;
                case FULL -> (flops - (last ? 6.0 * c.hiddenSize() * c.vocabSize() : 0)) / 3 * recomputedShare(c, c.numLayers() / (pp * vp));
            };
            double total = (flops + recomputed) * b * s; // per micro-batch, whole model width (TP1, CP1)
            double split = total * (1 - cal.tensorParallelSerialFraction()) / (tp * cp);
            double serial = total * cal.tensorParallelSerialFraction() / (cp * (c.sequenceParallel() ? tp : 1));
            double seconds = (tp == 1 ? total / cp : split + serial) / (peak * efficiency);
            if (seconds > worstStage) {
                worstStage = seconds;
                worstLayers = layers;
            }
        }

        double hiddenBytes = tokensPerRank * c.hiddenSize() * bytes;
        double tpBw = cluster.busBandwidth(tp, 1);
        double tpPerMicroBatch = 0;
        if (tp > 1) {
            double allReduce = latency + hiddenBytes * 2.0 * (tp - 1) / tp / tpBw;
            double exposedPerLayer = 2 * allReduce + 2 * allReduce * (1 - cal.backwardOverlapFraction());
            if (c.recompute() == TransformerConfig.Recompute.FULL) {
                exposedPerLayer += 2 * allReduce * recomputedShare(c, c.numLayers() / (pp * vp));
            }
            tpPerMicroBatch = worstLayers * exposedPerLayer;
        }
        double cpPerMicroBatch = 0;
        ContextParallelStages stages = ContextParallelStages.of(c, tp, cp);
        if (stages.ring() > 1) {
            // after an all-to-all over A ranks a rank holds A times the tokens of G/A (repeated) groups: a
            // ring block is as large as p2p's, and its ranks stride over the all-to-all's
            int ring = stages.ring();
            double kvBytes = 2.0 * tokensPerRank * c.numQueryGroups() * stages.groupRepeat() / tp * c.kvChannels() * bytes;
            double exchange = latency * (ring - 1) + kvBytes * (ring - 1) / cluster.busBandwidth(ring, tp * stages.allToAll());
            cpPerMicroBatch += worstLayers * 3 * exchange * cal.contextParallelExposedFraction(); // forward once, backward twice
        }
        if (stages.allToAll() > 1) {
            // four all-to-alls in forward (queries, keys, values in; outputs back), four in backward, over
            // consecutive ranks (within a node where A fits), each moving (A-1)/A of its tensor
            int a = stages.allToAll();
            double heads = 2.0 * c.numAttentionHeads() + 2.0 * c.numQueryGroups() * stages.groupRepeat();
            double moved = tokensPerRank * heads / tp * c.kvChannels() * bytes * (a - 1) / a;
            cpPerMicroBatch += worstLayers * 2 * (4 * latency + moved / cluster.busBandwidth(a, tp));
        }
        double epPerMicroBatch = 0;
        if (c.moe() != null && ep > 1) {
            double moeLayers = 0;
            for (int l = 0; l < worstLayers; l++) {
                moeLayers += c.isMoeLayer(l) ? 1 : 0;
            }
            double tokensBytes = hiddenBytes * c.moe().topK();
            double allToAll = latency + tokensBytes * (ep - 1) / ep / cluster.busBandwidth(ep, tp * cp);
            epPerMicroBatch = moeLayers * 4 * allToAll;
        }
        double stageTime = worstStage + tpPerMicroBatch + cpPerMicroBatch + epPerMicroBatch;
        double p2p = pp > 1 ? 2 * (latency + hiddenBytes / (c.sequenceParallel() ? tp : 1)
                / cluster.busBandwidth(2, tp * cp * dp)) : 0;
        double bubble = (pp - 1) / (double) vp * stageTime + m * vp * p2p;

        // data-parallel sync and optimizer, on the rank with the most parameters
        long maxParams = 0;
        for (int stage = 0; stage < pp; stage++) {
            List<ParameterInventory.Tensor> tensors = ParameterInventory.stage(c, layout, stage);
            maxParams = Math.max(maxParams, ParameterInventory.numel(tensors, false) + ParameterInventory.numel(tensors, true));
        }
        int group = dp * cp;
        double dpSync = 0;
        if (group > 1) {
            double gradBytes = (double) maxParams * (opt.gradReduceInFp32() ? 4 : bytes);
            double bw = cluster.busBandwidth(group, tp);
            double scatter = gradBytes * (group - 1) / group / bw;
            double gather = (double) maxParams * bytes * (group - 1) / group / bw;
            DataParallelShardingStrategy sharding = opt.dataParallelShardingStrategy();
            if (sharding.shardsGradients()) {
                // the last pass's reduce-scatter is exposed as the distributed optimizer's is; the earlier passes'
                // (ZeRO-3: and every pass's two gathers of the weights, for forward and for backward, rerun or
                // not) run on a second stream beside the passes' compute, exposed where they outlast it; ZeRO-3's
                // at least as long as the gather after the step they replace (see the class comment) and its first
                // layer's gather; ZeRO-2 gathers the updated weights after the step
                boolean zero3 = sharding.shardsParameters();
                double f = cal.dataParallelSyncFactor();
                double beside = f * ((m - 1) * scatter + (zero3 ? 2 * m * gather : 0));
                double exposed = Math.max(beside - m * worstStage,
                        zero3 ? f * gather * (1 + 1.0 / Math.max(1, worstLayers)) : 0);
                dpSync = f * scatter + exposed + (zero3 ? 0 : f * gather);
            } else {
                double comm = opt.useDistributedOptimizer() ? scatter + gather : 2 * scatter;
                dpSync = cal.dataParallelSyncFactor() * comm;
            }
        }
        double bandwidthScale = cal.memoryBandwidthGBps() / cluster.memoryBandwidthGBps();
        double updated = opt.useDistributedOptimizer() ? (double) maxParams / group : maxParams;
        double optimizer = (updated * cal.optimizerSecondsPerParameter() + maxParams * cal.gradCopySecondsPerParameter())
                * bandwidthScale;

        long tokensPerStep = w.globalBatchSize() * s;
        return new TimeEstimate(m * worstStage, m * tpPerMicroBatch, m * cpPerMicroBatch, m * epPerMicroBatch, bubble,
                dpSync, optimizer, tokensPerStep, layout.worldSize(), c.flopsPerToken(s), cluster.peakTflops());
    }

    private static boolean isMatrix(ParameterInventory.Tensor t) {
        return t.key().endsWith("weight") && !t.key().contains("layernorm") && !t.key().contains("router");
    }

    /**
     * The share of a chunk's layers that full recompute reruns: all of them under uniform, the first
     * {@code recomputeNumLayers} under block ({@code RecomputeSegment}).
     */
    static double recomputedShare(TransformerConfig c, int layersPerChunk) {
        int perChunk = Math.max(1, layersPerChunk);
        double recomputed = 0;
        for (RecomputeSegment segment : RecomputeSegment.of(c, perChunk)) {
            recomputed += segment.recomputed() ? segment.size() : 0;
        }
        return recomputed / perChunk;
    }

    /** Whether selective recompute reruns the layers' MLPs (the planner sizes every layer of a model with experts as MoE). */
    private static boolean recomputesMlp(TransformerConfig c) {
        return c.recomputes(c.moe() != null ? TransformerConfig.RecomputeModule.MOE : TransformerConfig.RecomputeModule.MLP);
    }

    /** Training FLOPs of one layer's MLP per token (6 per weight element; a token passes top-k experts and the shared expert). */
    private static double mlpFlops(TransformerConfig c) {
        int factor = c.activation().fc1Factor();
        if (c.moe() != null) {
            return 6.0 * c.hiddenSize() * (factor + 1) * ((double) c.moe().ffnHiddenSize() * c.moe().topK()
                    + c.moe().config().sharedExpertFfnHiddenSize());
        }
        return 6.0 * c.hiddenSize() * c.ffnHiddenSize() * (factor + 1);
    }
}
