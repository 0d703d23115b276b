package io.mcore4j.planner;

import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.TransformerConfig.Recompute;
import io.mcore4j.optimizer.DataParallelShardingStrategy;
import io.mcore4j.optimizer.LearningRateSchedule;
import io.mcore4j.training.CheckpointConfig;
import io.mcore4j.training.TrainingConfig;
import io.mcore4j.training.gpt.GptTrainingSetup;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;

/**
 * Enumerates layouts of a cluster's GPUs for a workload, keeps those the training setup accepts
 * ({@link GptTrainingSetup#dims}, the checks {@code pretrain-gpt} runs: heads, query groups, FFN and
 * padded vocabulary divisible by TP, layers by PP x VP, experts by EP, the world by TP x CP x PP,
 * the global batch by micro-batch x DP, the sequence by 2 x CP), estimates their memory and time,
 * and ranks those that fit by estimated iteration time (then by how much data parallelism shards,
 * least first, since the estimate does not count ZeRO-2's and ZeRO-3's per-pass bookkeeping; then by
 * memory). A layout with full recompute is tried as Megatron's {@code uniform} method with one layer
 * per group, and also as its {@code block} method with the fewest recomputed layers per chunk that fit.
 * Megatron FSDP's strategies ({@link SearchSpace#sharding()}) are tried where they fit a layout ({@link Layout}'s
 * rules): ZeRO-2 with the distributed optimizer at PP 1, ZeRO-3 too, with every recompute choice where the device
 * frees weights in place ({@link SearchSpace#freesWeightsInPlace()}), else only with full uniform recompute (every
 * layer rerun: no block method).
 */
public final class LayoutSearch {
    private static final TrainingConfig VALIDATION_ONLY =
            new TrainingConfig(1, LearningRateSchedule.constant(1e-4), 0, 1, 0, 0, CheckpointConfig.NONE, 0);

    private final Workload workload;
    private final ClusterSpec cluster;
    private final Calibration calibration;
    private final SearchSpace space;

    /**
     * @param workload what to train
     * @param cluster where
     * @param calibration the time model's constants
     * @param space which layouts to try
     */
    public LayoutSearch(Workload workload, ClusterSpec cluster, Calibration calibration, SearchSpace space) {
        this.workload = Objects.requireNonNull(workload, "workload");
        this.cluster = Objects.requireNonNull(cluster, "cluster");
        this.calibration = Objects.requireNonNull(calibration, "calibration");
        this.space = Objects.requireNonNull(space, "space");
    }

    /**
     * Every layout the search tries, in enumeration order, before any check.
     *
     * @return the candidates
     */
    public List<Layout> candidates() {
        int world = cluster.worldSize();
        TransformerConfig model = workload.model();
        List<Integer> experts = model.moe() == null ? List.of(1) : divisors(model.moe().numExperts());
        List<Layout> out = new ArrayList<>();
        for (int tp : divisors(world)) {
            if (space.tensorParallelWithinNode() && tp > cluster.gpusPerNode()) {
                continue;
            }
            for (int cp : space.contextParallel()) {
                for (int pp : divisors(world)) {
                    if ((long) tp * cp * pp > world || world % (tp * cp * pp) != 0) {
                        continue;
                    }
                    int dp = world / (tp * cp * pp);
                    for (int vp : pp == 1 ? List.of(1) : space.virtualStages()) {
                        for (int ep : experts) {
                            for (int mb : microBatchSizes(dp)) {
                                for (Recompute r : space.recompute()) {
                                    for (boolean distributed : dp * cp > 1 ? space.distributedOptimizer() : List.of(false)) {
                                        Layout layout = new Layout(tp, pp, vp, dp, cp, ep, mb, r, distributed);
                                        for (DataParallelShardingStrategy s : space.sharding()) {
                                            if (fits(layout, s)) {
                                                out.add(layout.withSharding(s));
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        return out;
    }

    /**
     * Whether a strategy is worth trying on a candidate: {@code no_shard} always; the others only where
     * the data-parallel group has more than one rank and {@link Layout}'s rules hold (the distributed
     * optimizer, PP 1), and for ZeRO-3 on a device that does not free weights in place only with full recompute,
     * which the candidate has as uniform, one layer per group (every layer rerun, as the model then requires).
     */
    private boolean fits(Layout layout, DataParallelShardingStrategy s) {
        if (s == DataParallelShardingStrategy.NO_SHARD) {
            return true;
        }
        return layout.dataParallel() * layout.contextParallel() > 1 && layout.distributedOptimizer()
                && layout.pipelineParallel() == 1 && (!s.shardsParameters() || recomputesEnoughForZero3(layout));
    }

    /**
     * Whether ZeRO-3 may release this layout's layers on the space's device: any recompute where it frees weights
     * in place, else only every layer recomputed.
     */
    private boolean recomputesEnoughForZero3(Layout layout) {
        return space.freesWeightsInPlace() || layout.recompute() == Recompute.FULL
                && TimeModel.recomputedShare(workload.modelFor(layout), layersPerChunk(layout)) == 1;
    }

    private int layersPerChunk(Layout layout) {
        return workload.model().numLayers() / (layout.pipelineParallel() * layout.virtualStages());
    }

    /**
     * Why the training setup refuses a layout, or null if it accepts it.
     *
     * @param layout a candidate
     * @return the setup's message naming the constraint, or null
     */
    public String rejection(Layout layout) {
        try {
            TransformerConfig c = workload.modelFor(layout);
            GptTrainingSetup setup = new GptTrainingSetup(c, workload.attention(), layout.tensorParallel(),
                    layout.pipelineParallel(), layout.virtualStages(), layout.expertParallel(), layout.contextParallel(),
                    workload.optimizerFor(layout), layout.microBatchSize(), workload.globalBatchSize(),
                    workload.seqLength(), VALIDATION_ONLY, 0, true);
            setup.dims(layout.worldSize());
            return null;
        } catch (IllegalArgumentException e) {
            return e.getMessage();
        }
    }

    /**
     * Estimates every accepted layout.
     *
     * @return accepted layouts with their estimates, fitting or not, fastest first
     */
    public List<PlannedLayout> evaluateAll() {
        return evaluate(new LinkedHashMap<>());
    }

    private List<PlannedLayout> evaluate(Map<String, int[]> rejected) {
        List<PlannedLayout> out = new ArrayList<>();
        long capacity = cluster.gpuMemoryBytes();
        for (Layout layout : candidates()) {
            String why = rejection(layout);
            if (why != null) {
                rejected.computeIfAbsent(why, k -> new int[1])[0]++;
                continue;
            }
            MemoryEstimate memory = MemoryModel.estimate(workload, layout, calibration);
            TimeEstimate time = TimeModel.estimate(workload, layout, cluster, calibration);
            out.add(new PlannedLayout(layout, memory, time, memory.total() <= capacity));
            // a block of fewer layers than a chunk leaves layers that keep their graphs: under ZeRO-3 only where
            // the device frees weights in place
            Layout block = layout.recompute() == Recompute.FULL
                    && (!layout.sharding().shardsParameters() || space.freesWeightsInPlace())
                    ? fewestBlockLayers(layout, capacity) : null;
            if (block != null) {
                MemoryEstimate blockMemory = MemoryModel.estimate(workload, block, calibration);
                out.add(new PlannedLayout(block, blockMemory, TimeModel.estimate(workload, block, cluster, calibration), true));
            }
        }
        out.sort(Comparator.comparingDouble((PlannedLayout p) -> p.time().total())
                .thenComparing(p -> p.layout().sharding()).thenComparingLong(p -> p.memory().total()));
        return out;
    }

    /**
     * The fastest layouts that fit, fastest first.
     *
     * @param limit how many to return at most
     * @return at least one layout
     * @throws NoLayoutFitsException naming the constraints that ruled the candidates out, and the
     *     smallest peak found if some ran but none fit
     */
    public List<PlannedLayout> best(int limit) {
        Map<String, int[]> rejected = new LinkedHashMap<>();
        List<PlannedLayout> all = evaluate(rejected);
        List<PlannedLayout> fitting = new ArrayList<>();
        for (PlannedLayout p : all) {
            if (p.fits() && fitting.size() < limit) {
                fitting.add(p);
            }
        }
        if (!fitting.isEmpty()) {
            return fitting;
        }
        StringBuilder msg = new StringBuilder(String.format(Locale.ROOT, "no layout of %d GPUs (%d per node, %.1f GiB each)"
                + " runs %s at global batch %d and sequence length %d:", cluster.worldSize(), cluster.gpusPerNode(),
                cluster.gpuMemoryGiB(), describe(workload.model()), workload.globalBatchSize(), workload.seqLength()));
        if (!rejected.isEmpty()) {
            msg.append(" the training setup refuses ");
            List<String> parts = new ArrayList<>();
            rejected.entrySet().stream().sorted((a, b) -> b.getValue()[0] - a.getValue()[0]).limit(6)
                    .forEach(e -> parts.add(e.getValue()[0] + " layouts because \"" + e.getKey() + "\""));
            msg.append(String.join("; ", parts)).append('.');
        }
        if (!all.isEmpty()) {
            PlannedLayout smallest = all.stream().min(Comparator.comparingLong(p -> p.memory().total())).orElseThrow();
            msg.append(String.format(Locale.ROOT, " %d layouts pass those checks but none fits in %.1f GiB: the smallest"
                            + " peak is %s with %s", all.size(), cluster.gpuMemoryGiB(), smallest.layout().name(),
                    smallest.memory().describe()));
        } else {
            msg.append(" no layout passes those checks");
        }
        throw new NoLayoutFitsException(msg.toString());
    }

    /**
     * Full recompute by Megatron's {@code block} method with the fewest recomputed layers per chunk
     * (the least recompute time) whose memory fits, when fewer than all of a chunk's layers do: the
     * estimate falls as layers are added, so a binary search finds it.
     *
     * @return the layout, or null when no block of fewer layers than a chunk has fits
     */
    private Layout fewestBlockLayers(Layout full, long capacity) {
        int perChunk = layersPerChunk(full);
        int lo = 1;
        int hi = perChunk - 1;
        Layout best = null;
        while (lo <= hi) {
            int mid = (lo + hi) >>> 1;
            Layout block = full.withFullRecompute(TransformerConfig.RecomputeMethod.BLOCK, mid);
            if (MemoryModel.estimate(workload, block, calibration).total() <= capacity) {
                best = block;
                hi = mid - 1;
            } else {
                lo = mid + 1;
            }
        }
        return best;
    }

    private static String describe(TransformerConfig c) {
        return String.format(Locale.ROOT, "a model of %d layers, hidden %d, %d heads (%d query groups), vocabulary %d",
                c.numLayers(), c.hiddenSize(), c.numAttentionHeads(), c.numQueryGroups(), c.vocabSize());
    }

    /**
     * The micro-batch sizes worth trying at this DP size: divisors of the per-replica batch up to the
     * space's maximum; when DP does not divide the global batch, only 1 (the setup then names the batch).
     */
    private List<Integer> microBatchSizes(int dp) {
        long batch = workload.globalBatchSize();
        if (batch % dp != 0) {
            return List.of(1);
        }
        List<Integer> out = new ArrayList<>();
        for (int mb = 1; mb <= space.maxMicroBatchSize(); mb++) {
            if ((batch / dp) % mb == 0) {
                out.add(mb);
            }
        }
        return out;
    }

    static List<Integer> divisors(int n) {
        List<Integer> out = new ArrayList<>();
        for (int d = 1; d <= n; d++) {
            if (n % d == 0) {
                out.add(d);
            }
        }
        return out;
    }
}
