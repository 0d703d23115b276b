package io.mcore4j.moe;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.pytorch.jni.JniUtils;
import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.tensorparallel.ColumnParallelLinear;
import io.mcore4j.tensorparallel.Initializers;
import io.mcore4j.tensorparallel.ParallelMlp;
import io.mcore4j.tensorparallel.RowParallelLinear;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * A benchmark, not a test: the host cost of one MoE layer pass (forward and backward of one micro-batch) at the
 * {@code probe} preset's widths (hidden 64, ffn 256, 4 x 32 tokens, 8 experts top-2, biases, GELU), next to the
 * dense MLP it replaces. Prints the median milliseconds of each, then the libtorch ops a pass runs, counted with
 * libtorch's profiler: top-level ops (each one entry into libtorch's dispatcher from Java or from a TorchScript
 * call) per site of the forward (router, dispatch, experts, combine), and the backward's autograd nodes by name.
 *
 * <pre>java -cp "moe/target/test-classes:moe/target/classes:samples/target/mcore4j/lib/*" \
 *     io.mcore4j.moe.MoeLayerOpCount [bf16|fp32] [iterations] [times]</pre>
 * ({@code times}: the medians only, without the profiles; libtorch's profiler aborted DJL 0.35.1's JNI on a GPU).
 */
public final class MoeLayerOpCount {
    private static final int HIDDEN = 64;
    private static final int FFN = 256;
    private static final int SEQ = 32;
    private static final int BATCH = 4;

    private MoeLayerOpCount() {}

    public static void main(String[] args) throws IOException {
        DataType dtype = args.length > 0 && args[0].equals("fp32") ? DataType.FLOAT32 : DataType.BFLOAT16;
        int iterations = args.length > 1 ? Integer.parseInt(args[1]) : 200;
        MoeConfig config = MoeConfig.builder(8, 2, FFN).dispatcher(MoeConfig.Dispatcher.ALL_TO_ALL).groupedGemm(true)
                .permuteFusion(true).addBias(true).dtype(dtype).build();
        ProcessGroups groups = Fixtures.soloGroups();
        try (NDManager m = NDManager.newBaseManager()) {
            MoeLayer moe = MoeLayer.build(config, HIDDEN, groups, m, new SeedScheme(1), "mlp.", new AuxLossScale());
            ParallelMlp dense = denseMlp(config, groups, m);
            NDArray input = DataTypes.toType(Fixtures.normal(m, 7, 1.0, SEQ, BATCH, HIDDEN), dtype, false);
            double denseMs = medianMs(dense::forward, dense.parameters(), input, m, iterations);
            double moeMs = medianMs(moe::forward, moe.parameters(), input, m, iterations);
            System.out.printf("moe-layer-op-count %s: layer pass (forward+backward, one micro-batch) median dense %.3f ms,"
                    + " MoE %.3f ms, ratio %.2f%n", dtype, denseMs, moeMs, moeMs / denseMs);
            routerTimes(config, m, iterations);
            if (args.length > 2 && args[2].equals("times")) {
                moe.close();
                dense.close();
                return;
            }
            Path dir = Files.createTempDirectory("moe-op-count");
            System.out.println("dense MLP pass:");
            report(profile(dense::forward, dense.parameters(), input, m, dir.resolve("dense.json")));
            System.out.println("MoE layer pass:");
            report(profile(moe::forward, moe.parameters(), input, m, dir.resolve("moe.json")));
            System.out.println("MoE layer forward by site:");
            sites(config, groups, input, m, dir);
            moe.close();
            dense.close();
        }
    }

    /**
     * The routing of one micro-batch's logits alone, forward and backward, through the one-call path and the composed
     * ops: the median milliseconds of each.
     */
    private static void routerTimes(MoeConfig config, NDManager m, int n) {
        TopKRouting.Options options = TopKRouting.Options.of(config);
        NDArray logits = DataTypes.toType(Fixtures.normal(m, 8, 1.0, SEQ * BATCH, config.numExperts()), config.dtype(),
                false);
        double[] ms = new double[2];
        for (int path = 0; path < 2; path++) {
            boolean fused = path == 0;
            double[] times = new double[n];
            for (int i = -20; i < n; i++) {
                long start = System.nanoTime();
                try (AutogradScope scope = AutogradScope.open(m)) {
                    NDArray x = Fixtures.leaf(logits, scope.manager());
                    TopKRouting.Selection s = fused ? TopKRouting.selectFused(scope, x, options, null, false).selection()
                            : TopKRouting.selectComposed(scope, x, options, null);
                    scope.backward(new NDArray[] {s.probs()}, new NDArray[] {DataTypes.ones(scope.manager(),
                            s.probs().getShape(), DataTypes.of(s.probs()), s.probs().getDevice())});
                }
                if (i >= 0) {
                    times[i] = (System.nanoTime() - start) / 1e6;
                }
            }
            Arrays.sort(times);
            ms[path] = times[n / 2];
        }
        System.out.printf("moe-layer-op-count %s: routing alone (forward+backward) median one call %.3f ms, composed"
                + " %.3f ms%n", config.dtype(), ms[0], ms[1]);
    }

    /** The dense MLP of the same widths. */
    private static ParallelMlp denseMlp(MoeConfig config, ProcessGroups groups, NDManager m) {
        ColumnParallelLinear fc1 = ColumnParallelLinear.builder(HIDDEN, FFN, groups.tp()).bias(true)
                .initializer(Initializers.normal(0.02, 1)).dtype(config.dtype()).manager(m).name("fc1").build();
        RowParallelLinear fc2 = RowParallelLinear.builder(FFN, HIDDEN, groups.tp()).bias(true).inputIsParallel(true)
                .initializer(Initializers.normal(0.02, 2)).dtype(config.dtype()).manager(m).name("fc2").build();
        return new ParallelMlp(fc1, fc2, config.activation(), true);
    }

    /** A layer's forward in a scope. */
    @FunctionalInterface
    private interface Layer {
        NDArray forward(AutogradScope scope, NDArray input);
    }

    private static void pass(Layer layer, List<Parameter> parameters, NDArray input, NDManager m) {
        try (AutogradScope scope = AutogradScope.open(m)) {
            NDArray x = Fixtures.leaf(input, scope.manager());
            NDArray out = layer.forward(scope, x);
            scope.backward(new NDArray[] {out}, new NDArray[] {DataTypes.ones(scope.manager(), out.getShape(), DataTypes.of(out), out.getDevice())});
        }
        for (Parameter p : parameters) {
            p.zeroGradient();
        }
    }

    private static double medianMs(Layer layer, List<Parameter> parameters, NDArray input, NDManager m, int n) {
        for (int i = 0; i < 20; i++) {
            pass(layer, parameters, input, m);
        }
        double[] ms = new double[n];
        for (int i = 0; i < n; i++) {
            long start = System.nanoTime();
            pass(layer, parameters, input, m);
            ms[i] = (System.nanoTime() - start) / 1e6;
        }
        Arrays.sort(ms);
        return ms[n / 2];
    }

    private static List<JsonObject> profile(Layer layer, List<Parameter> parameters, NDArray input, NDManager m, Path file)
            throws IOException {
        JniUtils.startProfile(false, false, false);
        pass(layer, parameters, input, m);
        JniUtils.stopProfile(file.toString());
        return events(file);
    }

    /** The router, the dispatch, the experts and the combine of one forward, each profiled alone. */
    private static void sites(MoeConfig config, ProcessGroups groups, NDArray input, NDManager m, Path dir)
            throws IOException {
        MoeGroups g = MoeGroups.of(groups);
        TopKRouter router = new TopKRouter(config, HIDDEN, g, m, 1, null, new AuxLossScale());
        LocalExperts experts = new LocalExperts(config, HIDDEN, g, m, new SeedScheme(1), "mlp.");
        TokenDispatcher dispatcher = new AllToAllTokenDispatcher(g, config.numExperts(), config.topK(),
                config.permuteFusion(), experts.readsGroupEnds());
        for (int warm = 0; warm < 2; warm++) {
            try (AutogradScope scope = AutogradScope.open(m)) {
                NDArray tokens = Fixtures.leaf(input.reshape(SEQ * BATCH, HIDDEN), scope.manager());
                Path[] files = new Path[4];
                for (int i = 0; i < files.length; i++) {
                    files[i] = dir.resolve("site" + i + ".json");
                }
                start(warm);
                Routing routing = router.route(scope, tokens, SEQ, BATCH);
                stop(warm, files[0]);
                start(warm);
                TokenDispatcher.Dispatched d = dispatcher.dispatch(scope, tokens, routing);
                stop(warm, files[1]);
                start(warm);
                NDArray y = experts.forward(scope, d.expertInput(), d.tokensPerExpert(), d.expertEnds());
                stop(warm, files[2]);
                start(warm);
                d.combine(scope, y);
                stop(warm, files[3]);
                if (warm == 1) {
                    String[] names = {"router", "dispatch", "experts", "combine"};
                    for (int i = 0; i < names.length; i++) {
                        List<JsonObject> ev = events(files[i]);
                        System.out.printf("  %-8s %3d ops: %s%n", names[i], topLevel(ev).size(), histogram(topLevel(ev)));
                    }
                }
            }
        }
        router.close();
        experts.close();
    }

    private static void start(int warm) {
        if (warm == 1) {
            JniUtils.startProfile(false, false, false);
        }
    }

    private static void stop(int warm, Path file) {
        if (warm == 1) {
            JniUtils.stopProfile(file.toString());
        }
    }

    private static List<JsonObject> events(Path file) throws IOException {
        JsonElement root = JsonParser.parseString(Files.readString(file));
        JsonArray array = root.isJsonArray() ? root.getAsJsonArray() : root.getAsJsonObject().getAsJsonArray("traceEvents");
        List<JsonObject> out = new ArrayList<>();
        for (JsonElement e : array) {
            JsonObject o = e.getAsJsonObject();
            if (o.has("dur") && o.has("name")) {
                out.add(o);
            }
        }
        return out;
    }

    /** Events not inside another event of the same thread. */
    private static List<JsonObject> topLevel(List<JsonObject> events) {
        List<JsonObject> sorted = new ArrayList<>(events);
        sorted.sort((a, b) -> Double.compare(a.get("ts").getAsDouble(), b.get("ts").getAsDouble()));
        List<JsonObject> out = new ArrayList<>();
        Map<String, Double> openUntil = new TreeMap<>();
        for (JsonObject e : sorted) {
            String tid = e.get("tid").getAsString();
            double ts = e.get("ts").getAsDouble();
            double end = ts + e.get("dur").getAsDouble();
            Double until = openUntil.get(tid);
            if (until == null || ts >= until) {
                out.add(e);
                openUntil.put(tid, end);
            }
        }
        return out;
    }

    /** Count and total microseconds per op name. */
    private static Map<String, String> histogram(List<JsonObject> events) {
        Map<String, Integer> counts = new TreeMap<>();
        Map<String, Double> micros = new TreeMap<>();
        for (JsonObject e : events) {
            String name = e.get("name").getAsString().replace("autograd::engine::evaluate_function: ", "");
            counts.merge(name, 1, Integer::sum);
            micros.merge(name, e.get("dur").getAsDouble(), Double::sum);
        }
        Map<String, String> out = new TreeMap<>();
        counts.forEach((name, n) -> out.put(name, n + " x " + Math.round(micros.get(name)) + " us"));
        return out;
    }

    private static void report(List<JsonObject> events) {
        List<JsonObject> top = topLevel(events);
        List<JsonObject> forward = new ArrayList<>();
        List<JsonObject> backwardNodes = new ArrayList<>();
        for (JsonObject e : top) {
            String name = e.get("name").getAsString();
            if (name.startsWith("autograd::engine::evaluate_function")) {
                backwardNodes.add(e);
            } else {
                forward.add(e);
            }
        }
        System.out.printf("  %d ops in all (%d top-level outside backward nodes, %d backward nodes)%n", events.size(),
                forward.size(), backwardNodes.size());
        System.out.println("  top-level: " + histogram(forward));
        System.out.println("  backward nodes: " + histogram(backwardNodes));
    }
}
