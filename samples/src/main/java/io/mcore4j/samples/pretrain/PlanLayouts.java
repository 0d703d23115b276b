package io.mcore4j.samples.pretrain;

import io.mcore4j.planner.Calibration;
import io.mcore4j.planner.ClusterSpec;
import io.mcore4j.planner.Layout;
import io.mcore4j.planner.LayoutSearch;
import io.mcore4j.planner.MemoryEstimate;
import io.mcore4j.planner.MemoryModel;
import io.mcore4j.planner.PlannedLayout;
import io.mcore4j.planner.SearchSpace;
import io.mcore4j.planner.TimeEstimate;
import io.mcore4j.planner.TimeModel;
import io.mcore4j.planner.Workload;
import io.mcore4j.samples.bench.GptBenchmark;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

import java.io.PrintStream;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * {@code plan}: the parallel layouts of a pretrain-gpt job on a cluster, ranked by estimated step
 * time among those that fit in GPU memory, each with its memory and time broken down and the
 * pretrain-gpt flags that run it ({@link LayoutSearch}). The model, batch, sequence and precision are
 * pretrain-gpt's flags (or a benchmark preset, {@code --model}); the cluster is a preset GPU kind with
 * sizes from flags, or a JSON file, whose GPUs are taken to free weights in place (mcore4j's native library on
 * CUDA: ZeRO-3 is planned with every recompute choice, {@link io.mcore4j.planner.SearchSpace#freesWeightsInPlace()}).
 * {@code --evaluate} estimates only the layout the flags give.
 * Exit codes: 0, 2 for bad flags or when no layout fits (one line naming why).
 *
 * <pre>plan --model 1.3b --global-batch-size 32 --gpus-per-node 4</pre>
 */
@Command(name = "plan", sortOptions = false)
public final class PlanLayouts {
    @Option(names = "--model", description = "A benchmark preset (1.3b, llama7b, tiny) instead of model flags; flags"
            + " given after it override it.")
    String model;
    @Option(names = "--gpu", description = "h200 or h100: memory, peak, bandwidths and the built-in calibration."
            + " Default: ${DEFAULT-VALUE}.")
    String gpu = "h200";
    @Option(names = "--gpus-per-node", description = "Default: ${DEFAULT-VALUE}.")
    int gpusPerNode = 8;
    @Option(names = "--nodes", description = "Default: ${DEFAULT-VALUE}.")
    int nodes = 1;
    @Option(names = "--gpu-memory-gib", description = "One GPU's memory (default: the --gpu kind's).")
    Double gpuMemoryGiB;
    @Option(names = "--intra-node-bandwidth", description = "All-reduce bus bandwidth inside a node, GB/s (default: the --gpu kind's).")
    Double intraNodeBandwidth;
    @Option(names = "--inter-node-bandwidth", description = "All-reduce bus bandwidth across nodes, GB/s (default: the --gpu kind's).")
    Double interNodeBandwidth;
    @Option(names = "--cluster", description = "A cluster JSON file (gpusPerNode, nodes, gpuMemoryGiB, peakTflops,"
            + " memoryBandwidthGBps, intraNodeBandwidthGBps, interNodeBandwidthGBps); replaces the flags above.")
    Path cluster;
    @Option(names = "--calibration", description = "A calibration JSON file (GptBenchmark --calibration-out writes one)"
            + " or a built-in name: h200, h100, cpu. Default: the --gpu kind's.")
    String calibration;
    @Option(names = "--top", description = "How many layouts to print. Default: ${DEFAULT-VALUE}.")
    int top = 5;
    @Option(names = "--evaluate", description = "Estimate only the layout the pretrain-gpt flags give.")
    boolean evaluate;

    private PlanLayouts() {}

    /** @param argv flags; {@code --help} lists them */
    public static void main(String[] argv) {
        System.exit(execute(argv, System.out, System.err));
    }

    /**
     * Runs the command without exiting the JVM.
     *
     * @param argv the flags
     * @param out where the plan goes
     * @param err where errors go
     * @return 0, or 2 for bad flags and when no layout fits
     */
    public static int execute(String[] argv, PrintStream out, PrintStream err) {
        PlanLayouts plan = new PlanLayouts();
        String preset = null;
        for (int i = 0; i + 1 < argv.length; i++) {
            if (argv[i].equals("--model")) {
                preset = argv[i + 1];
            }
        }
        List<String> presets = new ArrayList<>(List.of("--mock-data"));
        if (preset != null) {
            try {
                presets.addAll(GptBenchmark.presetFlags(preset));
            } catch (IllegalArgumentException e) {
                err.println("plan: " + e.getMessage());
                return 2;
            }
            if (List.of(argv).contains("--bf16")) {
                presets.remove("--fp16");
            }
        }
        PretrainArgs flags = new PretrainArgs();
        flags.trainsHere = false; // a plan for a cluster: no file or memory of this machine matters
        return PretrainGpt.execute("plan", flags, plan, presets, argv, out, err, (args, o) -> plan.run(args, o));
    }

    ClusterSpec cluster() {
        if (cluster != null) {
            return ClusterSpec.read(cluster);
        }
        ClusterSpec kind = switch (gpu.toLowerCase(Locale.ROOT)) {
            case "h200" -> ClusterSpec.h200(gpusPerNode, nodes);
            case "h100" -> ClusterSpec.h100(gpusPerNode, nodes);
            default -> throw new IllegalArgumentException("--gpu " + gpu + " is not one of h200, h100");
        };
        return new ClusterSpec(gpusPerNode, nodes, gpuMemoryGiB != null ? gpuMemoryGiB : kind.gpuMemoryGiB(),
                kind.peakTflops(), kind.memoryBandwidthGBps(),
                intraNodeBandwidth != null ? intraNodeBandwidth : kind.intraNodeBandwidthGBps(),
                interNodeBandwidth != null ? interNodeBandwidth : kind.interNodeBandwidthGBps());
    }

    private void run(PretrainArgs args, PrintStream out) {
        if (top < 1) {
            throw new IllegalArgumentException("--top " + top + " must be at least 1");
        }
        ClusterSpec c = cluster();
        if (args.peakTflops() != null) {
            c = new ClusterSpec(c.gpusPerNode(), c.nodes(), c.gpuMemoryGiB(), args.peakTflops(), c.memoryBandwidthGBps(),
                    c.intraNodeBandwidthGBps(), c.interNodeBandwidthGBps());
        }
        Calibration cal = Calibration.read(calibration != null ? calibration : gpu);
        Workload w = PlannerInputs.workload(args);
        out.printf(Locale.ROOT, "plan: %d GPUs (%d nodes x %d, %.1f GiB, %.0f TFLOP/s), calibration %s; global batch %d,"
                        + " sequence %d%n", c.worldSize(), c.nodes(), c.gpusPerNode(), c.gpuMemoryGiB(), c.peakTflops(),
                cal.device(), w.globalBatchSize(), w.seqLength());
        LayoutSearch search = new LayoutSearch(w, c, cal, SearchSpace.defaults());
        if (evaluate) {
            Layout layout = PlannerInputs.layout(args, c.worldSize());
            String refused = search.rejection(layout);
            if (refused != null) {
                throw new IllegalArgumentException(layout.name() + " does not run: " + refused);
            }
            MemoryEstimate m = MemoryModel.estimate(w, layout, cal);
            TimeEstimate t = TimeModel.estimate(w, layout, c, cal);
            print(out, 1, new PlannedLayout(layout, m, t, m.total() <= c.gpuMemoryBytes()), w);
            return;
        }
        List<PlannedLayout> best = search.best(top);
        for (int i = 0; i < best.size(); i++) {
            print(out, i + 1, best.get(i), w);
        }
    }

    private static void print(PrintStream out, int rank, PlannedLayout p, Workload w) {
        TimeEstimate t = p.time();
        out.printf(Locale.ROOT, "%d. %s: %,.0f tokens/s/GPU, MFU %.1f%%, step %.1f ms, peak %.1f GiB per GPU%s%n", rank,
                p.layout().name(), t.tokensPerSecondPerGpu(), 100 * t.mfu(), 1000 * t.total(),
                p.memory().total() / (double) (1L << 30), p.fits() ? "" : " (does not fit)");
        out.println("   memory: " + p.memory().describe());
        out.println("   time:   " + t.describe());
        out.println("   flags:  " + p.layout().flags(w.model().numLayers()));
    }
}
