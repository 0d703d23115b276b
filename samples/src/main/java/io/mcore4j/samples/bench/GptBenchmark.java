package io.mcore4j.samples.bench;

import ai.djl.Device;
import ai.djl.engine.Engine;
import ai.djl.util.cuda.CudaUtils;
import io.mcore4j.planner.Calibration;
import io.mcore4j.samples.pretrain.PlannerInputs;
import io.mcore4j.samples.pretrain.PretrainArgs;
import io.mcore4j.samples.pretrain.PretrainGpt;
import io.mcore4j.training.TrainStepResult;
import io.mcore4j.training.TrainingSummary;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;


import java.io.PrintStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.locks.LockSupport;

/**
 * GPT training throughput: {@code pretrain-gpt --mock-data} on a model preset, timed. It runs the
 * same code path as {@code pretrain-gpt} (the library's training step and loop), so its figure is
 * the figure a user's run gets; it adds presets, warm-up steps excluded from the timing, and a
 * one-line report.
 *
 * <pre>gpt-benchmark --model 1.3b --micro-batch-size 4 --micro-batches 2 --steps 10</pre>
 *
 * Every pretrain-gpt flag applies and overrides the preset. One process per GPU; several processes
 * are launched with torchrun. Step time excludes the warm-up steps; memory is what the CUDA driver
 * reports in use on the device (libtorch's caching allocator included), read after each step
 * ({@code --sample-memory}: every millisecond). {@code --phases} synchronises the device between the
 * phases of a step and prints their times, with the time the host took to queue forward and backward.
 */
@Command(name = "gpt-benchmark", sortOptions = false)
public final class GptBenchmark {
    /**
     * The model presets of {@code --model}, under their flag names ({@link #toString()}), and the
     * model flags each stands for.
     */
    public enum Preset {
        /** The 1.3B GPT: 24 layers, hidden 2048, 16 heads, sequence 2048. */
        gpt1_3b("1.3b", List.of("--num-layers", "24", "--hidden-size", "2048", "--num-attention-heads", "16",
                "--ffn-hidden-size", "8192", "--seq-length", "2048", "--vocab-size", "32768")),
        /** The LLaMA-7B shape: RMSNorm, RoPE, SwiGLU, no linear biases, untied output layer. */
        llama7b("llama7b", List.of("--num-layers", "32", "--hidden-size", "4096", "--num-attention-heads", "32",
                "--ffn-hidden-size", "11008", "--seq-length", "2048", "--vocab-size", "32000", "--normalization",
                "RMSNorm", "--position-embedding-type", "rope", "--swiglu", "--disable-bias-linear",
                "--untie-embeddings-and-output-weights")),
        /** Two small layers. */
        tiny("tiny", List.of("--num-layers", "2", "--hidden-size", "256", "--num-attention-heads", "4",
                "--seq-length", "256", "--vocab-size", "1024")),
        /** The 1.3B model's 24 layers at tiny widths: its step time is the host-side cost of a step. */
        probe("probe", List.of("--num-layers", "24", "--hidden-size", "64", "--num-attention-heads", "16",
                "--ffn-hidden-size", "256", "--seq-length", "32", "--vocab-size", "512"));

        private final String flag;
        private final List<String> modelFlags;

        Preset(String flag, List<String> modelFlags) {
            this.flag = flag;
            this.modelFlags = modelFlags;
        }

        /**
         * @param name a preset's flag name: 1.3b, llama7b, tiny or probe
         * @return the preset
         * @throws IllegalArgumentException naming the value and the presets
         */
        public static Preset of(String name) {
            for (Preset p : values()) {
                if (p.flag.equals(name)) {
                    return p;
                }
            }
            throw new IllegalArgumentException("--model " + name + " is not one of 1.3b, llama7b, tiny, probe");
        }

        /**
         * The flags of this preset; the benchmark's own defaults first ({@code plan --model} uses them too).
         *
         * @return the flags, a new mutable list
         */
        public List<String> flags() {
            List<String> flags = new ArrayList<>(List.of("--mock-data", "--micro-batch-size", "4", "--lr", "1e-4",
                    "--min-lr", "1e-4", "--lr-decay-style", "constant", "--weight-decay", "0", "--fp16"));
            flags.addAll(modelFlags);
            return flags;
        }

        /** @return the name {@code --model} takes, e.g. {@code 1.3b} */
        @Override
        public String toString() {
            return flag;
        }
    }

    @Option(names = "--model", description = "${COMPLETION-CANDIDATES} (probe: the 1.3B model's 24 layers at tiny"
            + " widths: its step time is the host-side cost of a step). Default: ${DEFAULT-VALUE}.")
    Preset model = Preset.gpt1_3b;
    @Option(names = "--micro-batches", description = "Micro-batches per step on each data-parallel replica (sets"
            + " --global-batch-size). Default: ${DEFAULT-VALUE}.")
    int microBatches = 2;
    @Option(names = "--steps", description = "Timed steps. Default: ${DEFAULT-VALUE}.")
    int steps = 10;
    @Option(names = "--warmup", description = "Untimed steps before them. Default: ${DEFAULT-VALUE}.")
    int warmup = 3;
    @Option(names = "--phases", description = "Synchronise the device between a step's phases and print their times.")
    boolean phases;
    @Option(names = "--sample-memory", description = "Sample device memory every millisecond (with"
            + " PYTORCH_NO_CUDA_MEMORY_CACHING=1 its peak approximates allocated bytes).")
    boolean sampleMemory;

    @Option(names = "--calibration-out", description = "Write a planner calibration (JSON) from this one-GPU run: its"
            + " matmul efficiency, with --phases the optimizer's cost per parameter, and the memory the planner does not count.")
    Path calibrationOut;
    @Option(names = "--calibration-base", description = "The calibration whose other values --calibration-out keeps:"
            + " h200, h100 or a file. Default: ${DEFAULT-VALUE}.")
    String calibrationBase = "h200";

    private GptBenchmark() {}

    /**
     * @param argv flags, see the class comment and {@code --help}
     */
    public static void main(String[] argv) {
        System.exit(execute(argv, System.out, System.err));
    }

    /**
     * Runs the benchmark without exiting the JVM.
     *
     * @param argv flags, see the class comment and {@code --help}
     * @param out where the result line goes
     * @param err where errors go
     * @return 0 done, 2 a bad flag or value, 1 a failed run
     */
    public static int execute(String[] argv, PrintStream out, PrintStream err) {
        GptBenchmark bench = new GptBenchmark();
        PretrainArgs args = new PretrainArgs();
        // the preset is read first so that every flag given on the command line overrides it; a value
        // that is no preset is left to the parser, which rejects it naming the value
        List<String> presetFlags = presetNamed(argv).flags();
        if (List.of(argv).contains("--bf16")) {
            presetFlags.remove("--fp16"); // the presets train in fp16 unless bf16 is asked for
        }
        return PretrainGpt.execute("gpt-benchmark", args, bench, presetFlags, argv, out, err,
                (a, o) -> bench.run(a, o));
    }

    private static Preset presetNamed(String[] argv) {
        Preset preset = Preset.gpt1_3b;
        for (int i = 0; i < argv.length; i++) {
            String value = argv[i].startsWith("--model=") ? argv[i].substring("--model=".length())
                    : argv[i].equals("--model") && i + 1 < argv.length ? argv[i + 1] : null;
            for (Preset p : Preset.values()) {
                if (p.flag.equals(value) || p.name().equals(value)) {
                    preset = p;
                }
            }
        }
        return preset;
    }

    /**
     * The flags of a preset named as {@code --model} takes it: {@link Preset#of}{@code (model).}{@link Preset#flags()}.
     *
     * @param model 1.3b, llama7b, tiny or probe
     * @return the flags, a new mutable list
     * @throws IllegalArgumentException for another name
     */
    public static List<String> presetFlags(String model) {
        return Preset.of(model).flags();
    }

    private void run(PretrainArgs args, PrintStream out) throws Exception {
        if (steps < 1 || warmup < 0 || microBatches < 1) {
            throw new IllegalArgumentException("--steps " + steps + " must be at least 1, --warmup " + warmup
                    + " at least 0, --micro-batches " + microBatches + " at least 1");
        }
        int world = Integer.parseInt(System.getenv().getOrDefault("WORLD_SIZE", "1"));
        int dp = world / args.modelParallelSize();
        args.globalBatchSize((long) args.microBatchSize() * microBatches * Math.max(dp, 1));
        Device device = Engine.getInstance().getGpuCount() > 0
                ? Device.gpu(Integer.parseInt(System.getenv().getOrDefault("LOCAL_RANK", "0"))) : Device.cpu();
        List<Double> seconds = new ArrayList<>();
        double[] phaseSums = new double[6];
        double[] memory = new double[2]; // peak, end of step (GiB)
        MemorySampler sampler = device.isGpu() && sampleMemory ? MemorySampler.start(device) : null;
        PrintStream quiet = new PrintStream(java.io.OutputStream.nullOutputStream());
        args.iterations(warmup + steps, warmup + steps); // the benchmark's --warmup and --steps decide them
        TrainingSummary summary = PretrainGpt.run(args, quiet, b -> b.listener((iteration, r) -> {
            if (iteration > warmup) {
                seconds.add(r.seconds());
                addPhases(phaseSums, r.phases());
            }
            if (device.isGpu()) {
                memory[1] = CudaUtils.getGpuMemory(device).getCommitted() / (double) (1L << 30);
                memory[0] = Math.max(memory[0], memory[1]);
            }
        }), phases, false);
        if (sampler != null) {
            memory[0] = Math.max(memory[0], sampler.stop());
        }
        if (summary.losses().isEmpty()) {
            return; // not the logging rank
        }
        double step = seconds.stream().mapToDouble(Double::doubleValue).average().orElse(Double.NaN);
        long tokensPerStep = (long) args.microBatchSize() * microBatches * Math.max(dp, 1) * args.seqLength();
        double tokensPerGpu = tokensPerStep / step / world;
        double tflops = args.setup().model().flopsPerToken(args.seqLength()) * tokensPerGpu / 1e12;
        double peak = args.peakTflops() != null ? args.peakTflops() : 989;
        io.mcore4j.core.fp8.Fp8Config fp8 = args.setup().model().fp8();
        out.printf(Locale.ROOT, "gpt-benchmark model=%s layout=TP%d CP%d PP%d DP%d attention=%s mbs=%d micro=%d seq=%d%s"
                        + " | tokens/s/GPU %.0f | TFLOP/s/GPU %.1f | MFU %.1f%% | step %.1f ms | GPU memory peak %.1f GiB,"
                        + " end of step %.1f GiB | loss %.4f%n",
                model, args.setup().tensorParallel(), args.setup().contextParallel(), args.setup().pipelineParallel(),
                Math.max(dp, 1),
                args.attentionBackend(), args.microBatchSize(), microBatches, args.seqLength(),
                fp8 == null ? "" : " fp8=" + fp8.format().megatronName() + "/" + fp8.recipe().megatronName(), tokensPerGpu, tflops,
                100 * tflops / peak, 1000 * step, memory[0], memory[1], summary.losses().get(summary.losses().size() - 1));
        if (calibrationOut != null) {
            Calibration cal = CalibrationWriter.calibrate(Calibration.read(calibrationBase), PlannerInputs.workload(args),
                    PlannerInputs.layout(args, world), Calibration.read(calibrationBase).device() + " (gpt-benchmark)",
                    step, phases ? phaseSums[1] / steps : Double.NaN, phases ? phaseSums[4] / steps : Double.NaN,
                    phases ? (phaseSums[3] + phaseSums[5]) / steps : Double.NaN, memory[0]);
            Files.writeString(calibrationOut, cal.toJson());
            out.println("gpt-benchmark calibration: " + calibrationOut);
        }
        if (phases) {
            out.printf(Locale.ROOT, "gpt-benchmark phases (ms per step, device synchronised between them): data %.1f |"
                            + " forward+backward %.1f (queued by the host in %.1f) | gradient sync %.1f | optimizer step %.1f"
                            + " | zero grad %.1f%n", 1000 * phaseSums[0] / steps, 1000 * phaseSums[1] / steps,
                    1000 * phaseSums[2] / steps, 1000 * phaseSums[3] / steps, 1000 * phaseSums[4] / steps,
                    1000 * phaseSums[5] / steps);
        }
    }

    private static void addPhases(double[] sums, TrainStepResult.PhaseTimes p) {
        if (p == null) {
            return;
        }
        sums[0] += p.data();
        sums[1] += p.forwardBackward();
        sums[2] += p.queued();
        sums[3] += p.gradSync();
        sums[4] += p.optimizer();
        sums[5] += p.zeroGrad();
    }

    /**
     * Samples the device memory in use every millisecond on a daemon thread. With libtorch's
     * caching allocator the figure only grows, so sampling adds nothing; with caching off
     * ({@code PYTORCH_NO_CUDA_MEMORY_CACHING=1}, slow) it follows the allocated bytes and its maximum
     * approximates the allocator's peak, the figure PyTorch reports as {@code max_memory_allocated}.
     */
    private static final class MemorySampler {
        private final Thread thread;
        private volatile boolean running = true;
        private volatile long peak;

        private MemorySampler(Device device) {
            thread = new Thread(() -> {
                while (running) {
                    peak = Math.max(peak, CudaUtils.getGpuMemory(device).getCommitted());
                    LockSupport.parkNanos(1_000_000);
                }
            }, "memory-sampler");
            thread.setDaemon(true);
        }

        static MemorySampler start(Device device) {
            MemorySampler s = new MemorySampler(device);
            s.thread.start();
            return s;
        }

        /** @return the peak in GiB */
        double stop() {
            running = false;
            try {
                thread.join();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            return peak / (double) (1L << 30);
        }
    }
}
