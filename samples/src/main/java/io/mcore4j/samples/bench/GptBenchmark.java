package io.mcore4j.samples.bench;

import ai.djl.Device;
import ai.djl.engine.Engine;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import ai.djl.util.cuda.CudaUtils;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.random.DeterministicRandom;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.models.GptConfigs;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.gpt.GptModel;
import io.mcore4j.models.transformer.LayerSpec;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.models.transformer.SdpaAttention;
import io.mcore4j.optimizer.DistributedDataParallel;
import io.mcore4j.optimizer.MegatronOptimizer;
import io.mcore4j.optimizer.OptimizerConfig;
import io.mcore4j.optimizer.Optimizers;
import io.mcore4j.optimizer.StepResult;
import io.mcore4j.parallel.Backend;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmFabric;
import io.mcore4j.pipeline.LayerAssignment;
import io.mcore4j.pipeline.ScheduleConfig;
import io.mcore4j.pipeline.Schedules;
import io.mcore4j.samples.launch.LaunchedRank;

import java.lang.management.MemoryUsage;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.locks.LockSupport;

/**
 * GPT training throughput on the default device (the GPU of LOCAL_RANK when CUDA is present).
 *
 * <pre>gpt-benchmark --model 1.3b --micro-batch-size 4 --micro-batches 2 --steps 10 --attention sdpa</pre>
 *
 * One process per GPU; several processes need a GPU communication backend (launched with
 * torchrun); a single process uses an in-JVM world of one rank. Step time excludes the warm-up
 * steps; memory is what the CUDA driver reports in use on the device (libtorch's caching allocator
 * included), sampled after each step ({@code --sample-memory}: every millisecond, see
 * {@code MemorySampler}). {@code --overlap-grad-reduce} starts data-parallel bucket reductions
 * during the last backward; {@code --phases} synchronises the device between the phases of a step
 * and prints their times, with the time the host took to queue the forward and backward passes.
 */
public final class GptBenchmark {
    private GptBenchmark() {}

    /**
     * @param argv flags, see the class comment
     * @throws Exception if the run fails
     */
    public static void main(String[] argv) throws Exception {
        Map<String, String> a = parse(argv);
        Mcore4j.ensureInitialized();
        int world = Integer.parseInt(System.getenv().getOrDefault("WORLD_SIZE", "1"));
        Duration timeout = Duration.ofSeconds(300);
        LaunchedRank rank = world == 1
                ? new LaunchedRank(new InJvmFabric(1, timeout).backend(0),
                        Engine.getInstance().getGpuCount() > 0 ? Device.gpu() : Device.cpu())
                : LaunchedRank.connect(timeout);
        try (Backend backend = rank.backend(); NDManager root = NDManager.newBaseManager(rank.device())) {
            run(a, backend, root, rank.device());
        }
    }

    private static void run(Map<String, String> a, Backend backend, NDManager root, Device device) {
        int tp = Integer.parseInt(a.get("--tensor-model-parallel-size"));
        int pp = Integer.parseInt(a.get("--pipeline-model-parallel-size"));
        int mbs = Integer.parseInt(a.get("--micro-batch-size"));
        int micro = Integer.parseInt(a.get("--micro-batches"));
        int steps = Integer.parseInt(a.get("--steps"));
        int warmup = Integer.parseInt(a.get("--warmup"));
        ParallelDims dims = ParallelDims.builder(backend.worldSize()).tensorParallel(tp).pipelineParallel(pp).build();
        ProcessGroups groups = ProcessGroups.create(dims, backend);
        TransformerConfig config = model(a.get("--model"))
                .toBuilder().sequenceParallel(Boolean.parseBoolean(a.get("--sequence-parallel")))
                .recompute(TransformerConfig.Recompute.valueOf(a.get("--recompute").toUpperCase(Locale.ROOT))).build();
        int seq = Integer.parseInt(a.getOrDefault("--seq-length", String.valueOf(config.maxSequenceLength())));
        config.validate(dims, 0);
        ModelContext ctx = ModelContext.create(config, groups, root, new SeedScheme(1234));
        if (!Boolean.parseBoolean(a.get("--cpu-initialization"))) {
            ctx = ctx.withDeviceInitialization();
        }
        LayerSpec spec = a.get("--attention").equals("sdpa")
                ? LayerSpec.tensorParallel().withCoreAttention(SdpaAttention::new) : LayerSpec.tensorParallel();
        LayerAssignment layers = LayerAssignment.even(config.numLayers(), pp, 1);
        int stage = groups.pipelineRank();
        GptModel model = GptModel.build(ctx, spec, layers.layers(stage, 0), stage == 0, stage == pp - 1);
        List<Parameter> params = new ArrayList<>(model.parameters());
        OptimizerConfig oc = OptimizerConfig.builder().algorithm(OptimizerConfig.Algorithm.ADAM).lr(1e-4)
                .fp16(config.dtype() == DataType.FLOAT16)
                .useDistributedOptimizer(Boolean.parseBoolean(a.get("--use-distributed-optimizer")))
                .fusedAdam(Boolean.parseBoolean(a.get("--fused-adam")))
                .gradReduceInFp32(Boolean.parseBoolean(a.get("--grad-reduce-in-fp32")))
                .overlapGradReduce(Boolean.parseBoolean(a.get("--overlap-grad-reduce"))).build();
        DistributedDataParallel ddp = new DistributedDataParallel(params, groups, oc, model.sharedEmbeddingParameters());
        if (oc.overlapGradReduce()) {
            model.addGradientReadyListener(ddp);
        }
        MegatronOptimizer optimizer = Optimizers.create(params, ddp, groups, oc);
        DeterministicRandom tokens = new SeedScheme(99).generator("benchmark-tokens", groups.dataParallelRank());
        long local = config.sequenceParallel() ? seq / tp : seq;
        ScheduleConfig sc = new ScheduleConfig(micro, new Shape(local, mbs, config.hiddenSize()), config.dtype(), false, 0, false);
        List<Double> times = new ArrayList<>();
        double peakGiB = 0;
        double endGiB = 0;
        StepResult last = null;
        boolean phases = Boolean.parseBoolean(a.get("--phases"));
        double[] phaseSeconds = new double[4];
        double hostSeconds = 0;
        MemorySampler sampler = device.isGpu() && Boolean.parseBoolean(a.get("--sample-memory")) ? MemorySampler.start(device) : null;
        for (int step = 0; step < warmup + steps; step++) {
            long start = System.nanoTime();
            long[] marks = new long[5];
            marks[0] = start;
            double scale = optimizer.lossScale();
            ddp.expectBackwardPasses(micro);
            Schedules.forwardBackward((scope, chunk, mb, input) -> {
                NDArray ids = null;
                if (model.isPreProcess() || model.isPostProcess()) {
                    NDArray u = tokens.uniform(scope.manager(), new Shape(seq + 1, mbs), DataType.FLOAT32);
                    ids = Tensors.scale(u, config.vocabSize(), scope.manager()).floor().toType(DataType.INT64, false);
                }
                NDArray out = model.forward(scope, ids == null ? null : ids.get("0:" + seq), input,
                        ids == null ? null : ids.get("1:" + (seq + 1)));
                return model.isPostProcess() ? Tensors.scale(out, scale, scope.manager()) : out;
            }, 1, groups, root, sc);
            long queued = System.nanoTime();
            marks[1] = phases ? synchronize(root) : 0;
            ddp.finishGradSync();
            marks[2] = phases ? synchronize(root) : 0;
            last = optimizer.step(1e-4, 0.0); // reads the gradient norm: one host synchronisation per step
            marks[3] = phases ? synchronize(root) : 0;
            ddp.zeroGrad();
            marks[4] = phases ? synchronize(root) : 0;
            if (phases && step >= warmup) {
                hostSeconds += (queued - start) / 1e9;
                for (int p = 0; p < 4; p++) {
                    phaseSeconds[p] += (marks[p + 1] - marks[p]) / 1e9;
                }
            }
            double seconds = (System.nanoTime() - start) / 1e9;
            if (step >= warmup) {
                times.add(seconds);
            }
            if (device.isGpu()) {
                MemoryUsage mem = CudaUtils.getGpuMemory(device);
                endGiB = mem.getCommitted() / (double) (1L << 30);
                peakGiB = Math.max(peakGiB, endGiB);
            }
        }
        if (sampler != null) {
            peakGiB = Math.max(peakGiB, sampler.stop());
        }
        double stepTime = times.stream().mapToDouble(Double::doubleValue).average().orElse(Double.NaN);
        double tokensPerStep = (double) mbs * micro * dims.dataParallel() * seq;
        double tokensPerGpu = tokensPerStep / stepTime / dims.worldSize();
        double tflops = config.flopsPerToken(seq) * tokensPerGpu / 1e12;
        double peak = Double.parseDouble(a.get("--peak-tflops"));
        if (backend.worldRank() == 0) {
            System.out.printf(Locale.ROOT, "gpt-benchmark model=%s layout=TP%d PP%d DP%d attention=%s mbs=%d micro=%d seq=%d"
                            + " | tokens/s/GPU %.0f | TFLOP/s/GPU %.1f | MFU %.1f%% | step %.1f ms | GPU memory peak %.1f GiB,"
                            + " end of step %.1f GiB | loss scale %.0f%n",
                    a.get("--model"), tp, pp, dims.dataParallel(), a.get("--attention"), mbs, micro, seq, tokensPerGpu, tflops,
                    100 * tflops / peak, 1000 * stepTime, peakGiB, endGiB, last.lossScale());
        }
        if (phases && backend.worldRank() == 0) {
            System.out.printf(Locale.ROOT, "gpt-benchmark phases (ms per step, device synchronised between them): forward+backward %.1f"
                            + " (queued by the host in %.1f) | gradient sync %.1f | optimizer step %.1f | zero grad %.1f%n",
                    1000 * phaseSeconds[0] / steps, 1000 * hostSeconds / steps, 1000 * phaseSeconds[1] / steps, 1000 * phaseSeconds[2] / steps,
                    1000 * phaseSeconds[3] / steps);
        }
        optimizer.close();
        ddp.close();
        model.close();
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

    /** Waits for the device's queued work (a device-to-host read on the default stream) and returns the time. */
    private static long synchronize(NDManager manager) {
        try (NDManager temp = manager.newSubManager()) {
            temp.zeros(new Shape(1)).toFloatArray();
        }
        return System.nanoTime();
    }

    private static TransformerConfig model(String name) {
        return switch (name) {
            case "1.3b" -> GptConfigs.gpt1_3b();
            case "llama7b" -> GptConfigs.llama7b();
            case "tiny" -> TransformerConfig.builder(2, 256, 4, 1024).maxSequenceLength(256).dropout(0, 0)
                    .dtype(DataType.FLOAT16).build();
            // the 1.3B model's structure (24 layers, 16 heads, the same op count) at widths where the
            // device does almost nothing: its step time is the host-side cost per step
            case "probe" -> TransformerConfig.builder(24, 64, 16, 512).ffnHiddenSize(256).maxSequenceLength(32)
                    .dropout(0, 0).dtype(DataType.FLOAT16).build();
            default -> throw new IllegalArgumentException("--model " + name + " is not one of 1.3b, llama7b, tiny, probe");
        };
    }

    private static Map<String, String> parse(String[] argv) {
        Map<String, String> a = new LinkedHashMap<>();
        a.put("--model", "1.3b");
        a.put("--tensor-model-parallel-size", "1");
        a.put("--pipeline-model-parallel-size", "1");
        a.put("--sequence-parallel", "false");
        a.put("--micro-batch-size", "4");
        a.put("--micro-batches", "2");
        a.put("--steps", "10");
        a.put("--warmup", "3");
        a.put("--attention", "sdpa");
        a.put("--recompute", "none");
        a.put("--use-distributed-optimizer", "false");
        a.put("--cpu-initialization", "false");
        a.put("--peak-tflops", "989");
        a.put("--phases", "false");
        a.put("--fused-adam", "true");
        a.put("--grad-reduce-in-fp32", "true");
        a.put("--sample-memory", "false");
        a.put("--overlap-grad-reduce", "false");
        for (int i = 0; i < argv.length; i++) {
            if (!a.containsKey(argv[i]) && !argv[i].equals("--seq-length")) {
                throw new IllegalArgumentException("unknown flag " + argv[i] + "; flags: " + a.keySet() + " --seq-length");
            }
            boolean isSwitch = List.of("--sequence-parallel", "--use-distributed-optimizer", "--cpu-initialization", "--phases",
                    "--sample-memory", "--overlap-grad-reduce").contains(argv[i]);
            if (isSwitch) {
                a.put(argv[i], "true");
            } else if (i + 1 < argv.length) {
                a.put(argv[i], argv[++i]);
            } else {
                throw new IllegalArgumentException("flag " + argv[i] + " needs a value");
            }
        }
        if (!List.of("sdpa", "composed").contains(a.get("--attention"))) {
            throw new IllegalArgumentException("--attention " + a.get("--attention") + " is not sdpa or composed");
        }
        return a;
    }
}
