package io.mcore4j.planner;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.types.DataType;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.TransformerConfig.Recompute;
import io.mcore4j.models.TransformerConfig.RecomputeMethod;
import io.mcore4j.optimizer.DataParallelShardingStrategy;
import io.mcore4j.tensorparallel.MlpActivation;

import java.util.List;
import java.util.Locale;

import org.junit.jupiter.api.Test;

/**
 * Megatron FSDP in the planner: the memory of each sharding strategy against bytes counted by hand, the
 * time model's collectives, the layout rules, and the search choosing ZeRO-3 only where nothing else fits.
 */
class FsdpPlanTest {
    private static final Calibration H200 = Calibration.builtIn("h200");
    private static final DataParallelShardingStrategy NO_SHARD = DataParallelShardingStrategy.NO_SHARD;
    private static final DataParallelShardingStrategy ZERO2 = DataParallelShardingStrategy.OPTIM_GRADS;
    private static final DataParallelShardingStrategy ZERO3 = DataParallelShardingStrategy.OPTIM_GRADS_PARAMS;

    /** A LLaMA shape: RMSNorm, RoPE, SwiGLU, grouped queries, no biases, untied output layer, bf16. */
    static TransformerConfig llama(int layers, int hidden, int heads, int groups, int ffn, int seq) {
        return TransformerConfig.builder(layers, hidden, heads, 32000).queryGroups(groups).ffnHiddenSize(ffn)
                .maxSequenceLength(seq).normalization(TransformerConfig.Normalization.RMS_NORM, 1e-5)
                .positionEmbedding(TransformerConfig.PositionEmbedding.ROPE).activation(MlpActivation.SWIGLU)
                .addBiasLinear(false).tiedEmbeddings(false).dropout(0, 0).dtype(DataType.BFLOAT16).build();
    }

    private static Layout dp4FullRecompute(int microBatch) {
        return new Layout(1, 1, 1, 4, 1, 1, microBatch, Recompute.FULL, true);
    }

    /** One layer of {@link #tiny()}. */
    private static final long TINY_LAYER = (4 + 2 * 2) * 16 * 64 // linear_qkv
            + 64 * 64                                             // linear_proj
            + 2 * 128 * 64 + 64 * 128                             // linear_fc1 ([gate; up]) and linear_fc2
            + 2 * 64;                                             // the two norms
    private static final long TINY_EMBEDDING = 256 * 64;
    /** The embedding, the output layer and the final norm. */
    private static final long TINY_OUTSIDE = TINY_EMBEDDING + 256 * 64 + 64;
    /** A bucket closes once full: at most its size (10,000 fp32 elements) less one, plus fc1. */
    private static final long TINY_BUCKET = 10_000 - 1 + 2 * 128 * 64;

    /**
     * 4 layers, hidden 64, 4 heads of 16, 2 query groups, SwiGLU FFN 128, vocabulary 256 (a multiple of 128),
     * sequence 64, global batch 4, buckets of 40,000 bytes.
     */
    private static Workload tiny() {
        TransformerConfig tiny = llama(4, 64, 4, 2, 128, 64).withVocabSize(256);
        Workload base = ReadmeFigures.workload(tiny, 64, 1, 1, 4, true);
        return new Workload(tiny, 64, 4, 128, base.optimizer().toBuilder().bucketSizeBytes(4 * 10_000).build(),
                base.attention());
    }

    @Test
    void memoryPerStrategyMatchesBytesCountedByHand() {
        Workload w = tiny();
        long layer = TINY_LAYER;
        long embedding = TINY_EMBEDDING;
        long outside = TINY_OUTSIDE;
        assertEquals(36_992, layer);
        long all = 4 * layer + outside;
        long shard = all / 4;                // 45,200 per rank over DP4
        long bucket = TINY_BUCKET;

        MemoryEstimate distOpt = MemoryModel.estimate(w, dp4FullRecompute(1), H200);
        assertEquals(2 * all, distOpt.parameters());
        assertEquals(2 * all, distOpt.gradients());
        assertEquals(2 * all, distOpt.gradientsAtActivationPeak());
        assertEquals(12 * shard, distOpt.optimizerState(), "fp32 master and two moments of the shard");
        assertEquals(4 * shard + 40_000, distOpt.gradientBuffers(), "the fp32 shard and the bucket being scattered");

        Layout noRecompute = new Layout(1, 1, 1, 4, 1, 1, 1, Recompute.NONE, true);
        MemoryEstimate zero2 = MemoryModel.estimate(w, noRecompute.withSharding(ZERO2), H200);
        assertEquals(2 * all, zero2.parameters());
        assertEquals(12 * shard, zero2.optimizerState());
        assertEquals(2 * (embedding + bucket), zero2.gradients(), "whole .grads: the embedding's (never reported), one bucket");
        // a report (a layer's backward) completes at most the larger of a bucket and a layer
        assertEquals(4 * shard + 2 * 4 * Math.max(bucket, layer), zero2.gradientBuffers(),
                "the shard sum and two reports' reductions in flight");
        assertEquals(zero2.gradients() + zero2.gradientBuffers(), zero2.gradientsAtActivationPeak());
        // without ZeRO-3's residency backward reports no layer full recompute checkpoints, nor the head after them
        MemoryEstimate zero2Recomputed = MemoryModel.estimate(w, dp4FullRecompute(1).withSharding(ZERO2), H200);
        assertEquals(2 * (all + bucket), zero2Recomputed.gradients());

        MemoryEstimate zero3 = MemoryModel.estimate(w, dp4FullRecompute(1).withSharding(ZERO3), H200);
        assertEquals(2 * (outside + 3 * layer), zero3.parameters(), "outside the layers and three gathered layers");
        assertEquals(zero2.gradients(), zero3.gradients(), "the residency reports recomputed layers and the head");
        assertEquals(zero2.gradientBuffers(), zero3.gradientBuffers());
        assertEquals(zero2.optimizerState(), zero3.optimizerState());
        assertEquals(distOpt.activations(), zero3.activations(), "the same full recompute");
    }

    /**
     * ZeRO-3 where the device frees weights in place: layers that keep their graphs keep the distributed optimizer's
     * activations (their saved weights are views of the freed buffers), the parameters are ZeRO-3's (outside the
     * layers and three gathered layers) and the whole gradients ZeRO-2's (backward reports every layer).
     */
    @Test
    void zero3WithoutRecomputeKeepsTheDistributedOptimizersActivations() {
        Workload w = tiny();
        long all = 4 * TINY_LAYER + TINY_OUTSIDE;
        long shard = all / 4;
        Layout none = new Layout(1, 1, 1, 4, 1, 1, 1, Recompute.NONE, true);
        MemoryEstimate distOpt = MemoryModel.estimate(w, none, H200);
        MemoryEstimate zero3 = MemoryModel.estimate(w, none.withSharding(ZERO3), H200);
        MemoryEstimate zero3Recomputed = MemoryModel.estimate(w, dp4FullRecompute(1).withSharding(ZERO3), H200);
        assertEquals(2 * (TINY_OUTSIDE + 3 * TINY_LAYER), zero3.parameters(), "outside the layers and three gathered layers");
        assertEquals(distOpt.activations(), zero3.activations(), "every layer keeps its graph, as without ZeRO-3");
        assertEquals(distOpt.activationsPerMicroBatch(), zero3.activationsPerMicroBatch());
        assertTrue(zero3.activations() > zero3Recomputed.activations(), "no layer recomputed keeps more");
        assertEquals(2 * (TINY_EMBEDDING + TINY_BUCKET), zero3.gradients(),
                "whole .grads: the embedding's (never reported), one bucket");
        assertEquals(4 * shard + 2 * 4 * Math.max(TINY_BUCKET, TINY_LAYER), zero3.gradientBuffers(),
                "the shard sum and two reports' reductions in flight");
        assertEquals(zero3.gradients() + zero3.gradientBuffers(), zero3.gradientsAtActivationPeak());
        assertEquals(12 * shard, zero3.optimizerState());
        assertEquals(2 * TINY_LAYER, distOpt.parameters() - zero3.parameters(),
                "one layer of four is never whole: the saving is its weights");

        // a block of full recompute: the recomputed layers keep only their inputs, the others their graphs
        Layout block = dp4FullRecompute(1).withFullRecompute(RecomputeMethod.BLOCK, 2);
        MemoryEstimate zero3Block = MemoryModel.estimate(w, block.withSharding(ZERO3), H200);
        assertEquals(MemoryModel.estimate(w, block, H200).activations(), zero3Block.activations());
        assertEquals(zero3.parameters(), zero3Block.parameters());
        assertEquals(zero3.gradients(), zero3Block.gradients(), "recomputed layers are reported under ZeRO-3 too");

        // time: the recompute follows the layout, the two gathers per pass do not
        ClusterSpec cluster = ClusterSpec.h200(4, 1);
        TimeEstimate distOptTime = TimeModel.estimate(w, none, cluster, H200);
        TimeEstimate zero3Time = TimeModel.estimate(w, none.withSharding(ZERO3), cluster, H200);
        TimeEstimate recomputedTime = TimeModel.estimate(w, dp4FullRecompute(1).withSharding(ZERO3), cluster, H200);
        assertEquals(distOptTime.compute(), zero3Time.compute(), "nothing rerun");
        assertTrue(zero3Time.compute() < recomputedTime.compute());
    }

    /**
     * The search tries ZeRO-3 with every recompute choice where the device frees weights in place, and only with
     * every layer recomputed where it does not (the CPU: the model would refuse the step).
     */
    @Test
    void theSearchOffersZero3WithoutRecomputeOnlyWhereWeightsAreFreedInPlace() {
        Workload w = ReadmeFigures.gpt1_3b(4, 2, 4, true);
        SearchSpace zero3Only = SearchSpace.defaults().only(ZERO3);
        assertTrue(zero3Only.freesWeightsInPlace(), "GPUs free weights in place by default");
        List<PlannedLayout> inPlace = new LayoutSearch(w, ClusterSpec.h200(4, 1), H200, zero3Only).evaluateAll();
        for (Recompute r : Recompute.values()) {
            assertTrue(inPlace.stream().anyMatch(p -> p.fits() && p.layout().recompute() == r), r.toString());
        }
        PlannedLayout fastest = inPlace.stream().filter(PlannedLayout::fits).findFirst().orElseThrow();
        assertEquals(Recompute.NONE, fastest.layout().recompute(), fastest.layout().name() + " fits without recompute");

        List<PlannedLayout> views = new LayoutSearch(w, ClusterSpec.h200(4, 1), H200,
                zero3Only.withFreesWeightsInPlace(false)).evaluateAll();
        assertFalse(views.isEmpty());
        for (PlannedLayout p : views) {
            assertEquals(ZERO3, p.layout().sharding());
            assertEquals(RecomputeMethod.UNIFORM, p.layout().recomputeMethod(), p.layout().name() + ": every layer rerun");
        }
    }

    @Test
    void zero3GathersBesideComputeAndExposesThemWhereTheLinkIsSlow() {
        Workload w = ReadmeFigures.gpt1_3b(1, 4, 4, true);
        for (ClusterSpec cluster : List.of(ClusterSpec.h200(4, 1), new ClusterSpec(1, 4, 139.7, 989, 4800, 340, 2))) {
            TimeEstimate distOpt = TimeModel.estimate(w, dp4FullRecompute(1), cluster, H200);
            TimeEstimate zero2 = TimeModel.estimate(w, dp4FullRecompute(1).withSharding(ZERO2), cluster, H200);
            TimeEstimate zero3 = TimeModel.estimate(w, dp4FullRecompute(1).withSharding(ZERO3), cluster, H200);
            assertEquals(distOpt.compute(), zero3.compute(), "the recompute is the layout's");
            assertTrue(zero2.dataParallelSync() >= distOpt.dataParallelSync(), "ZeRO-2 is never estimated faster");
            assertTrue(zero3.dataParallelSync() > distOpt.dataParallelSync(), "ZeRO-3 is never estimated faster either");
            boolean fast = cluster.nodes() == 1;
            // in a node the gathers hide behind compute: they count as the distributed optimizer's gather after the
            // step they replace, and the first layer's (a 24th of it) waits; across a 2 GB/s link 8 gathers per step
            // cannot hide
            assertEquals(fast, zero3.dataParallelSync() < distOpt.dataParallelSync() * (1 + 1.0 / 24),
                    cluster + ": " + zero3.describe() + " / " + distOpt.describe());
        }
    }

    @Test
    void aLayoutRefusesStrategiesThatDoNotFitIt() {
        Layout pp2 = new Layout(1, 2, 1, 2, 1, 1, 1, Recompute.FULL, true);
        assertTrue(assertThrows(IllegalArgumentException.class, () -> pp2.withSharding(ZERO2)).getMessage()
                .contains("pipeline"));
        // ZeRO-3 takes any recompute: whether layers that keep their graphs may be released is the device's (the search's)
        Layout block = dp4FullRecompute(1).withFullRecompute(RecomputeMethod.BLOCK, 2);
        assertEquals("TP1 PP1 DP4 mb1 full block 2 fsdp optim_grads_params", block.withSharding(ZERO3).name());
        Layout none = new Layout(1, 1, 1, 4, 1, 1, 1, Recompute.NONE, false);
        assertTrue(none.withSharding(ZERO3).flags(24).contains("--recompute-granularity none --use-distributed-optimizer"
                + " --use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params"), none.withSharding(ZERO3).flags(24));
        assertThrows(IllegalArgumentException.class, () -> new Layout(1, 1, 1, 4, 1, 1, 1, Recompute.NONE, null, 0,
                false, ZERO2), "sharded gradients need the distributed optimizer");
        Layout zero3 = dp4FullRecompute(2).withSharding(ZERO3);
        assertTrue(zero3.flags(24).endsWith("--use-distributed-optimizer --use-megatron-fsdp"
                + " --data-parallel-sharding-strategy optim_grads_params"), zero3.flags(24));
        assertEquals("TP1 PP1 DP4 mb2 full uniform 1 fsdp optim_grads_params", zero3.name());
    }

    /** LLaMA-30B's shape (32.5B parameters): 5 bytes per parameter over 4 model-parallel ranks do not fit, ZeRO-3's 4 do. */
    @Test
    void theSearchPicksZero3WhereNothingElseFits() {
        Workload w = ReadmeFigures.workload(llama(60, 6656, 52, 52, 17920, 2048), 2048, 1, 4, 4, true);
        LayoutSearch search = new LayoutSearch(w, ClusterSpec.h200(4, 1), H200, SearchSpace.defaults());
        List<PlannedLayout> fitting = search.evaluateAll().stream().filter(PlannedLayout::fits).toList();
        assertFalse(fitting.isEmpty());
        for (PlannedLayout p : fitting) {
            assertEquals(ZERO3, p.layout().sharding(), p.layout().name() + ": " + p.memory().describe());
        }
        PlannedLayout best = search.best(1).get(0);
        System.out.printf("LLaMA-30B on 4 H200s: %s, %s; %s%n", best.layout().name(), best.memory().describe(),
                best.time().describe());
        NoLayoutFitsException none = assertThrows(NoLayoutFitsException.class, () -> new LayoutSearch(w,
                ClusterSpec.h200(4, 1), H200, SearchSpace.defaults().only(NO_SHARD)).best(1));
        assertTrue(none.getMessage().contains("none fits"), none.getMessage());
    }

    /** The 1.3B model fits every way: the distributed optimizer (or plain DP) without recompute is faster than ZeRO-3. */
    @Test
    void theSearchKeepsTheDistributedOptimizerWhereEverythingFits() {
        Workload w = ReadmeFigures.gpt1_3b(4, 2, 4, true);
        List<PlannedLayout> all = new LayoutSearch(w, ClusterSpec.h200(4, 1), H200, SearchSpace.defaults()).evaluateAll();
        PlannedLayout best = all.stream().filter(PlannedLayout::fits).findFirst().orElseThrow();
        assertEquals(NO_SHARD, best.layout().sharding(), best.layout().name());
        PlannedLayout zero3 = all.stream().filter(p -> p.fits() && p.layout().sharding() == ZERO3).findFirst().orElseThrow();
        assertTrue(zero3.time().total() > best.time().total(), zero3.time().describe() + " / " + best.time().describe());
    }

    /**
     * Issue 36's ~20B LLaMA (48 layers, hidden 6144, FFN 16384, 48 heads, 8 query groups, sequence 4096) at DP4
     * on H200s: neither replicas nor the distributed optimizer fit, ZeRO-3 does (the estimate multi-gpu-check.sh's
     * llama20b-zero3 row is compared with).
     */
    @Test
    void issue36sTwentyBillionLlamaFitsAtDp4OnlyWithSharding() {
        Workload w = ReadmeFigures.workload(llama(48, 6144, 48, 8, 16384, 4096), 4096, 1, 4, 4, true);
        long capacity = ClusterSpec.h200(4, 1).gpuMemoryBytes();
        for (boolean distributed : new boolean[] {false, true}) {
            for (Recompute r : Recompute.values()) {
                Layout l = new Layout(1, 1, 1, 4, 1, 1, 1, r, distributed);
                assertTrue(MemoryModel.estimate(w, l, H200).total() > capacity, l.name());
            }
        }
        // the FLOPs per token torch_dist_gpt_bench.py --arch llama counts for its MFU (its formula, evaluated in Python)
        assertEquals(128_015_400_960.0, w.model().flopsPerToken(4096));
        MemoryEstimate zero2 = MemoryModel.estimate(w, dp4FullRecompute(1).withSharding(ZERO2), H200);
        MemoryEstimate zero3 = MemoryModel.estimate(w, dp4FullRecompute(1).withSharding(ZERO3), H200);
        MemoryEstimate distOpt = MemoryModel.estimate(w, dp4FullRecompute(1), H200);
        System.out.println("LLaMA ~20B, DP4, full recompute, micro-batch 1: ZeRO-3 " + zero3.describe() + "; ZeRO-2 "
                + zero2.describe() + "; distributed optimizer " + distOpt.describe());
        assertTrue(zero3.total() < distOpt.total() && distOpt.total() < zero2.total());
        assertTrue(zero2.total() > capacity, zero2.describe());
        assertTrue(zero3.total() < capacity, zero3.describe());
        assertEquals(84.4, MemoryEstimate.gib(zero3.total()), 0.05, "with full recompute");

        // where weights are freed in place: --recompute-method block --recompute-num-layers 12 (12 of 48 layers rerun),
        // which issue 36's run measured on 4 x H200 at 139.4 GiB peak (the driver's figure, expandable segments)
        Layout block12 = dp4FullRecompute(1).withFullRecompute(RecomputeMethod.BLOCK, 12).withSharding(ZERO3);
        MemoryEstimate zero3Block12 = MemoryModel.estimate(w, block12, H200);
        System.out.printf(Locale.ROOT, "LLaMA ~20B, DP4, micro-batch 1, %s: %s (measured: 139.4 GiB)%n",
                block12.name(), zero3Block12.describe());
        assertEquals(zero3.parameters(), zero3Block12.parameters());
        assertTrue(zero3Block12.activations() > zero3.activations(), "36 layers keep their graphs");
    }

    /**
     * What the search picks for issue 36's ~20B LLaMA on 4 H200s, where the GPUs free weights in place and where they
     * do not: without in-place freeing every ZeRO-3 layout it offers reruns every layer; with it the fastest ZeRO-3
     * layout keeps some layers' graphs and is estimated faster.
     */
    @Test
    void issue36sTwentyBillionLlamaSearchWithAndWithoutInPlaceFreeing() {
        Workload w = ReadmeFigures.workload(llama(48, 6144, 48, 8, 16384, 4096), 4096, 1, 4, 4, true);
        ClusterSpec cluster = ClusterSpec.h200(4, 1);
        double[] fastestZero3 = new double[2];
        for (boolean inPlace : new boolean[] {true, false}) {
            SearchSpace space = SearchSpace.defaults().withFreesWeightsInPlace(inPlace);
            PlannedLayout best = new LayoutSearch(w, cluster, H200, space).best(1).get(0);
            List<PlannedLayout> zero3 = new LayoutSearch(w, cluster, H200, space.only(ZERO3)).best(3);
            System.out.printf(Locale.ROOT, "LLaMA ~20B on 4 H200s, weights freed in place %s: %s, %s; %s%n",
                    inPlace, best.layout().name(), best.memory().describe(), best.time().describe());
            fastestZero3[inPlace ? 0 : 1] = zero3.get(0).time().total();
            if (inPlace) {
                assertTrue(zero3.get(0).layout().recomputeMethod() != RecomputeMethod.UNIFORM, zero3.get(0).layout().name());
            }
            for (PlannedLayout p : zero3) {
                System.out.printf(Locale.ROOT, "  ZeRO-3: %s, %.1f GiB, step %.0f ms%n", p.layout().name(),
                        MemoryEstimate.gib(p.memory().total()), 1000 * p.time().total());
                if (!inPlace) {
                    assertEquals(RecomputeMethod.UNIFORM, p.layout().recomputeMethod(), p.layout().name());
                }
            }
        }
        assertTrue(fastestZero3[0] < fastestZero3[1], "keeping graphs saves recompute");
    }
}
