package io.mcore4j.samples.pretrain;

import ai.djl.Device;
import ai.djl.engine.Engine;
import ai.djl.util.cuda.CudaUtils;
import io.mcore4j.core.kernel.Kernels;
import io.mcore4j.core.kernel.StorageResize;
import io.mcore4j.planner.Calibration;
import io.mcore4j.planner.ClusterSpec;
import io.mcore4j.planner.LayoutSearch;
import io.mcore4j.planner.PlannedLayout;
import io.mcore4j.planner.SearchSpace;
import io.mcore4j.planner.Workload;

import java.io.PrintStream;
import java.util.Locale;

/**
 * {@code pretrain-gpt --auto-layout}: runs the planner for the job's ranks and sets the layout flags
 * (TP, PP, virtual stages, CP, EP, micro-batch size, recompute, distributed optimizer, Megatron FSDP's
 * strategy) to the fastest layout estimated to fit. The planner tries every strategy, or with
 * {@code --use-megatron-fsdp} only the {@code --data-parallel-sharding-strategy} given, or with CUDA
 * graphs none (a replayed graph neither gathers weights nor reduces per pass). ZeRO-3 is tried without recompute only
 * where the job's device frees weights in place (a {@link StorageResize}: mcore4j's native library on a CUDA device),
 * whatever the cluster file says, since the model refuses it elsewhere when the step is built. The cluster is
 * {@code --auto-layout-cluster}'s file, else this machine:
 * its GPUs (the H200 calibration for GPUs of more than 100 GiB, else the H100 one), or on the CPU the
 * in-JVM ranks sharing the machine's memory (memory-only calibration: among layouts that fit, the
 * time ranking there is not measured).
 */
final class AutoLayout {
    private AutoLayout() {}

    /**
     * @param args the flags, changed in place
     * @param worldSize the job's ranks
     * @param device the device the ranks run on (whether it frees weights in place decides ZeRO-3's recompute)
     * @param out where the chosen layout is printed
     * @throws IllegalArgumentException if no layout fits (naming why) or the cluster file's size differs from the job's
     */
    static void apply(PretrainArgs args, int worldSize, Device device, PrintStream out) {
        ClusterSpec cluster;
        Calibration calibration;
        boolean gpu = Engine.getInstance().getGpuCount() > 0
                && !System.getenv().getOrDefault("MCORE4J_DEVICE", "").equalsIgnoreCase("cpu");
        if (args.autoLayoutCluster != null) {
            try {
                cluster = ClusterSpec.read(args.autoLayoutCluster);
            } catch (IllegalArgumentException | java.io.UncheckedIOException e) {
                throw new IllegalArgumentException("--auto-layout-cluster " + args.autoLayoutCluster + ": " + e.getMessage(), e);
            }
            calibration = Calibration.builtIn(cluster.gpuMemoryGiB() > 100 ? "h200" : "h100");
        } else if (gpu) {
            double gib = CudaUtils.getGpuMemory(Device.gpu()).getMax() / (double) (1L << 30);
            int perNode = Integer.parseInt(System.getenv().getOrDefault("LOCAL_WORLD_SIZE", String.valueOf(worldSize)));
            ClusterSpec kind = gib > 100 ? ClusterSpec.h200(perNode, worldSize / perNode) : ClusterSpec.h100(perNode, worldSize / perNode);
            cluster = new ClusterSpec(perNode, Math.max(1, worldSize / perNode), gib, kind.peakTflops(),
                    kind.memoryBandwidthGBps(), kind.intraNodeBandwidthGBps(), kind.interNodeBandwidthGBps());
            calibration = Calibration.builtIn(gib > 100 ? "h200" : "h100");
        } else {
            double gib = physicalGiB() / worldSize;
            cluster = new ClusterSpec(worldSize, 1, gib, 1, 20, 10, 10);
            calibration = Calibration.builtIn("cpu");
        }
        if (cluster.worldSize() != worldSize) {
            throw new IllegalArgumentException("--auto-layout-cluster " + args.autoLayoutCluster + " describes "
                    + cluster.worldSize() + " GPUs but the job has " + worldSize + " ranks");
        }
        Workload w = PlannerInputs.workload(args);
        // CUDA graphs replay no gathers nor per-pass reductions: no FSDP strategy beyond the distributed optimizer
        SearchSpace all = SearchSpace.defaults()
                .withFreesWeightsInPlace(Kernels.find(StorageResize.class, device).isPresent());
        SearchSpace space = args.useMegatronFsdp ? all.only(args.shardingStrategy())
                : "none".equals(args.cudaGraphImpl) ? all
                : all.only(io.mcore4j.optimizer.DataParallelShardingStrategy.NO_SHARD);
        PlannedLayout best = new LayoutSearch(w, cluster, calibration, space).best(1).get(0);
        PlannerInputs.apply(args, best.layout(), w.model().numLayers());
        out.printf(Locale.ROOT, "auto-layout: %s (%s); estimated %.1f GiB per rank, %s%n", best.layout().name(),
                best.layout().flags(w.model().numLayers()), best.memory().total() / (double) (1L << 30),
                best.time().describe());
    }

    private static double physicalGiB() {
        try {
            for (String line : java.nio.file.Files.readAllLines(java.nio.file.Path.of("/proc/meminfo"))) {
                if (line.startsWith("MemTotal:")) {
                    return Long.parseLong(line.replaceAll("[^0-9]", "")) / (double) (1L << 20);
                }
            }
        } catch (java.io.IOException | RuntimeException e) {
            return 8;
        }
        return 8;
    }
}
