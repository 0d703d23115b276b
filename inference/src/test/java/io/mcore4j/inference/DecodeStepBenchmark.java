package io.mcore4j.inference;

import ai.djl.pytorch.jni.JniUtils;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.gpt.GptModel;
import io.mcore4j.models.transformer.LayerSpec;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Random;
import java.util.TreeMap;

/**
 * Host cost of one decode step on the CPU: a tiny LLaMA-shaped model with many layers (the GPU's decode is
 * host-bound, so the CPU's per-op overhead on tiny tensors is a fair proxy for it). Prints milliseconds per
 * generated token at each batch size (wall clock, and the generating thread's CPU time, which a busy machine
 * distorts less) and, from libtorch's profiler, the operators dispatched per step
 * (top-level ones: each is at least one call from Java into libtorch) with the most frequent names.
 *
 * <p>Args: {@code [layers=22] [hidden=64] [batchSizes=1,16] [tokens=64]}; {@code -Dbench.opByOp=true} runs the
 * layers op by op (the path before {@link CachedLayer}); {@code -Dmcore4j.inference.fuse=false} runs the layer
 * module over narrowed caches without libtorch's graph optimisation instead of the static-shape module under it
 * ({@link Generator#fuse(boolean)}; {@code -Dai.djl.pytorch.graph_optimizer=true|false} forces the optimisation).
 * Run it with {@code OMP_NUM_THREADS=1} on a shared
 * machine: libtorch's spinning worker threads distort tiny ops when the cores are busy.
 */
public final class DecodeStepBenchmark {
    private DecodeStepBenchmark() {}

    /**
     * Runs the benchmark.
     *
     * @param args see the class comment
     */
    public static void main(String[] args) {
        int layers = args.length > 0 ? Integer.parseInt(args[0]) : 22;
        int hidden = args.length > 1 ? Integer.parseInt(args[1]) : 64;
        int[] batchSizes = java.util.Arrays.stream((args.length > 2 ? args[2] : "1,16").split(",")).mapToInt(Integer::parseInt).toArray();
        int tokens = args.length > 3 ? Integer.parseInt(args[3]) : 64;
        int promptLength = 8;
        TransformerConfig c = TransformerConfig.builder(layers, hidden, 4, 256).maxSequenceLength(promptLength + tokens + 8)
                .ffnHiddenSize(4 * hidden).dropout(0, 0).initStd(0.02).queryGroups(2)
                .positionEmbedding(TransformerConfig.PositionEmbedding.ROPE).activation(io.mcore4j.tensorparallel.MlpActivation.SWIGLU)
                .addBiasLinear(false).tiedEmbeddings(false).normalization(TransformerConfig.Normalization.RMS_NORM, 1e-5).build();
        InJvmWorld.run(1, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.of(1, 1, 1));
            int[] numbers = new int[layers];
            for (int k = 0; k < layers; k++) {
                numbers[k] = k;
            }
            GptModel model = GptModel.build(ModelContext.create(c, groups, rank.manager(), new SeedScheme(1)),
                    LayerSpec.tensorParallel(), numbers, true, true);
            Generator generator = new Generator(model).fusedLayers(!Boolean.getBoolean("bench.opByOp"));
            Random random = new Random(3);
            for (int b : batchSizes) {
                List<int[]> prompts = new ArrayList<>();
                for (int i = 0; i < b; i++) {
                    prompts.add(random.ints(promptLength, 0, 256).toArray());
                }
                generator.generate(prompts, SamplingParams.greedy(tokens)); // warm-up
                double best = Double.MAX_VALUE;
                double bestCpu = Double.MAX_VALUE;
                java.lang.management.ThreadMXBean threads = java.lang.management.ManagementFactory.getThreadMXBean();
                for (int rep = 0; rep < 3; rep++) {
                    long t0 = System.nanoTime();
                    long c0 = threads.getCurrentThreadCpuTime();
                    generator.generate(prompts, SamplingParams.greedy(tokens));
                    best = Math.min(best, (System.nanoTime() - t0) / 1e6 / tokens);
                    bestCpu = Math.min(bestCpu, (threads.getCurrentThreadCpuTime() - c0) / 1e6 / tokens);
                }
                // operators per decode step: the difference of two runs, so the prefill drops out
                int few = 4;
                Map<String, Integer> opsFew = profile(() -> generator.generate(prompts, SamplingParams.greedy(few)));
                Map<String, Integer> opsMany = profile(() -> generator.generate(prompts, SamplingParams.greedy(few + 8)));
                Map<String, Double> perStep = new TreeMap<>();
                double total = 0;
                for (var e : opsMany.entrySet()) {
                    double n = (e.getValue() - opsFew.getOrDefault(e.getKey(), 0)) / 8.0;
                    if (n > 0) {
                        perStep.put(e.getKey(), n);
                        total += n;
                    }
                }
                StringBuilder top = new StringBuilder();
                perStep.entrySet().stream().sorted(Map.Entry.<String, Double>comparingByValue().reversed()).limit(Integer.getInteger("bench.top", 12))
                        .forEach(e -> top.append(String.format(Locale.ROOT, " %s %.0f,", e.getKey(), e.getValue())));
                System.out.printf(Locale.ROOT, "decode %d layers x hidden %d, batch %2d: %.3f ms per step (%.3f ms of this"
                        + " thread's CPU time), %.0f native ops per step (%.1f per layer); most: %s%n", layers, hidden, b, best,
                        bestCpu, total, total / layers, top);
            }
            return null;
        });
    }

    /** Top-level operator counts by name while {@code body} runs on this thread. */
    private static Map<String, Integer> profile(Runnable body) {
        try {
            Path trace = Files.createTempFile("mcore4j-decode-profile", ".json");
            JniUtils.startProfile(false, false, false);
            try {
                body.run();
            } finally {
                JniUtils.stopProfile(trace.toString());
            }
            Map<String, Integer> counts = topLevel(JsonParser.parseString(Files.readString(trace)));
            if (System.getProperty("bench.keepTrace") == null) {
                Files.delete(trace);
            } else {
                System.out.println("trace: " + trace);
            }
            return counts;
        } catch (IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }

    private record Event(String name, double start, double end, String thread) {}

    private static Map<String, Integer> topLevel(JsonElement json) {
        List<Event> events = new ArrayList<>();
        Iterable<JsonElement> all = json.isJsonArray() ? json.getAsJsonArray() : json.getAsJsonObject().getAsJsonArray("traceEvents");
        for (JsonElement e : all) {
            JsonObject o = e.getAsJsonObject();
            if (!o.has("dur") || !o.has("ts")) {
                continue;
            }
            double ts = o.get("ts").getAsDouble();
            events.add(new Event(o.get("name").getAsString(), ts, ts + o.get("dur").getAsDouble(),
                    o.has("tid") ? o.get("tid").getAsString() : ""));
        }
        events.sort(Comparator.comparingDouble(Event::start).thenComparing(Comparator.comparingDouble(Event::end).reversed()));
        Map<String, Double> openUntil = new HashMap<>();
        Map<String, Integer> counts = new TreeMap<>();
        for (Event e : events) {
            double until = openUntil.getOrDefault(e.thread(), Double.NEGATIVE_INFINITY);
            if (e.start() >= until) {
                counts.merge(e.name(), 1, Integer::sum);
                openUntil.put(e.thread(), e.end());
            }
        }
        return counts;
    }
}
