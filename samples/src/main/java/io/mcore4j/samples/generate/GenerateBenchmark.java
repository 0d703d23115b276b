package io.mcore4j.samples.generate;

import ai.djl.Device;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import com.google.gson.Gson;
import com.google.gson.JsonArray;
import com.google.gson.JsonParser;
import io.mcore4j.tensorparallel.MlpActivation;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.inference.Completion;
import io.mcore4j.inference.Generator;
import io.mcore4j.inference.SamplingParams;
import io.mcore4j.inference.engine.ContinuousBatchingEngine;
import io.mcore4j.inference.engine.EngineConfig;
import io.mcore4j.inference.engine.EngineRequest;
import io.mcore4j.inference.engine.GenerationEngine;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.gpt.GptModel;
import io.mcore4j.models.transformer.LayerSpec;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.parallel.Backend;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;
import io.mcore4j.samples.launch.LaunchedRank;
import io.mcore4j.samples.launch.ParallelLayoutOptions;

import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;

import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * Greedy-generation throughput of a LLaMA-shaped GPT on one device (a GPU when there is one), or split over
 * {@code --tensor-model-parallel-size} ranks (one process per GPU under torchrun; ranks of this JVM on the CPU): loads
 * weights from a safetensors file of whole tensors in mcore4j's keys, generates a fixed number of tokens for batches of
 * the given prompts with no early stop, and prints tokens/s per batch size. With
 * {@code scripts/inference/gpu_generate_bench.sh} it runs beside transformers' {@code generate()} on the
 * same weights and prompts. With {@code --engine} the batch goes through the continuous-batching engine instead
 * ({@link ContinuousBatchingEngine}: paged cache, decode steps replayed from CUDA graphs), its requests submitted at
 * once.
 */
@Command(name = "generate-benchmark", mixinStandardHelpOptions = true, sortOptions = false,
        description = "Prints greedy-generation tokens/s of a LLaMA-shaped GPT.")
public final class GenerateBenchmark implements Callable<Integer> {
    @Option(names = "--weights", required = true, description = "safetensors file in mcore4j's parameter keys")
    Path weights;

    @Option(names = "--prompts", required = true, description = "JSON array of prompts, each an array of token ids (equal lengths)")
    Path prompts;

    @Option(names = "--output", description = "write each batch size's generated ids of every request here (JSON)")
    Path output;

    @Option(names = "--batch-sizes", split = ",", defaultValue = "1,16", description = "(default: ${DEFAULT-VALUE})")
    List<Integer> batchSizes;

    @Option(names = "--num-tokens-to-generate", defaultValue = "256", description = "(default: ${DEFAULT-VALUE})")
    int tokens;

    @Option(names = "--warmup-tokens", defaultValue = "16", description = "tokens of the untimed run per batch size (default: ${DEFAULT-VALUE})")
    int warmupTokens;

    @Option(names = "--engine", description = "generate through the continuous-batching engine (paged cache,"
            + " graph-captured decode) instead of Generator: the batch's requests are submitted at once")
    boolean engine;

    @Option(names = "--max-model-len", defaultValue = "512",
            description = "with --engine: positions per sequence that decode steps attend over (default: ${DEFAULT-VALUE})")
    int maxModelLength;

    @Option(names = "--no-cuda-graphs", description = "with --engine: run decode steps eagerly")
    boolean noCudaGraphs;

    @Option(names = "--tensor-model-parallel-size", defaultValue = "1", description = "ranks the model is split over:"
            + " under a launcher (torchrun) one process per rank, otherwise ranks in this JVM (default: ${DEFAULT-VALUE})")
    int tensorParallel;

    @Option(names = "--distributed-timeout-seconds", defaultValue = "600",
            description = "how long a rank waits for its peers (default: ${DEFAULT-VALUE})")
    int timeoutSeconds;

    @Option(names = "--num-layers", defaultValue = "16") int layers;
    @Option(names = "--hidden-size", defaultValue = "2048") int hidden;
    @Option(names = "--num-attention-heads", defaultValue = "32") int heads;
    @Option(names = "--num-query-groups", defaultValue = "8") int groups;
    @Option(names = "--ffn-hidden-size", defaultValue = "8192") int ffn;
    @Option(names = "--vocab-size", defaultValue = "32000") int vocab;
    @Option(names = "--seq-length", defaultValue = "2048") int seqLength;
    @Option(names = "--rotary-base", defaultValue = "10000") double rotaryBase;
    @Option(names = "--norm-epsilon", defaultValue = "1e-5") double normEpsilon;
    @Option(names = "--fp32", description = "run in float32 instead of float16") boolean fp32;

    /** Greedy ids of every request of the batch for {@code n} new tokens. */
    private interface Generation {
        List<int[]> generate(int n) throws Exception;
    }

    /** Submits every prompt at once and waits for all of them; their ids in order. */
    private static List<int[]> throughEngine(ContinuousBatchingEngine engine, List<int[]> prompts, int n) throws Exception {
        List<CompletableFuture<int[]>> done = new ArrayList<>();
        for (int[] prompt : prompts) {
            CompletableFuture<int[]> future = new CompletableFuture<>();
            List<Integer> ids = new ArrayList<>();
            engine.submit(new EngineRequest(prompt, SamplingParams.greedy(n), null, false), new GenerationEngine.TokenStream() {
                @Override
                public void onToken(int token, float logprob) {
                    ids.add(token);
                }

                @Override
                public void onFinish(GenerationEngine.FinishReason reason, int promptTokens, int completionTokens) {
                    future.complete(ids.stream().mapToInt(Integer::intValue).toArray());
                }

                @Override
                public void onError(Throwable error) {
                    future.completeExceptionally(error);
                }
            });
            done.add(future);
        }
        List<int[]> out = new ArrayList<>();
        for (CompletableFuture<int[]> f : done) {
            out.add(f.get());
        }
        return out;
    }

    /**
     * Runs the benchmark and exits with its code.
     *
     * @param argv flags; {@code --help} lists them
     */
    public static void main(String[] argv) {
        System.exit(new CommandLine(new GenerateBenchmark()).execute(argv));
    }

    /** @return the LLaMA-shaped model these flags describe (RMSNorm, RoPE, SwiGLU, no biases, untied output layer) */
    TransformerConfig config() {
        return TransformerConfig.builder(layers, hidden, heads, vocab).queryGroups(groups)
                .ffnHiddenSize(ffn).maxSequenceLength(seqLength)
                .normalization(TransformerConfig.Normalization.RMS_NORM, normEpsilon)
                .positionEmbedding(TransformerConfig.PositionEmbedding.ROPE).rotary(rotaryBase, 1.0)
                .activation(MlpActivation.SWIGLU).addBiasLinear(false).tiedEmbeddings(false)
                .dropout(0, 0).dtype(fp32 ? DataType.FLOAT32 : DataType.FLOAT16).build();
    }

    @Override
    public Integer call() throws Exception {
        Mcore4j.ensureInitialized();
        TransformerConfig config = config();
        List<int[]> all = new ArrayList<>();
        for (var p : JsonParser.parseString(Files.readString(prompts, StandardCharsets.UTF_8)).getAsJsonArray()) {
            JsonArray ids = p.getAsJsonArray();
            int[] row = new int[ids.size()];
            for (int i = 0; i < row.length; i++) {
                row[i] = ids.get(i).getAsInt();
            }
            all.add(row);
        }
        if (tensorParallel < 1) {
            throw new IllegalArgumentException("--tensor-model-parallel-size " + tensorParallel + " must be at least 1");
        }
        Map<String, List<int[]>> generated;
        if (ParallelLayoutOptions.launched()) {
            LaunchedRank rank = LaunchedRank.connect(Duration.ofSeconds(timeoutSeconds));
            try (Backend backend = rank.backend(); NDManager root = NDManager.newBaseManager(rank.device())) {
                generated = onRank(config, all, backend, root);
            }
        } else {
            if (tensorParallel > 1 && LaunchedRank.onGpu()) {
                throw new IllegalArgumentException("--tensor-model-parallel-size " + tensorParallel + " on GPUs runs one"
                        + " process per GPU: start it under a launcher (torchrun --nproc_per_node=" + tensorParallel
                        + " --no-python java ...); ranks in one JVM run on the CPU (MCORE4J_DEVICE=cpu)");
            }
            Device device = LaunchedRank.onGpu() ? Device.gpu() : Device.cpu();
            generated = InJvmWorld.run(tensorParallel, Duration.ofSeconds(timeoutSeconds), rank -> {
                try (NDManager root = NDManager.newBaseManager(device)) {
                    return onRank(config, all, rank.backend(), root);
                }
            }).get(0);
        }
        if (generated == null) {
            return 0; // launched, and not rank 0: rank 0 prints and writes
        }
        if (output != null) {
            Files.writeString(output, new Gson().toJson(generated), StandardCharsets.UTF_8);
        }
        return 0;
    }

    /**
     * Builds this rank's part of the model, loads its weights and times every batch size; on rank 0 prints the
     * figures and returns each batch size's ids, elsewhere returns null. With the engine only rank 0 submits: the
     * other ranks' engines follow its plans until it closes.
     */
    private Map<String, List<int[]>> onRank(TransformerConfig config, List<int[]> all, Backend backend, NDManager root)
            throws Exception {
        if (backend.worldSize() != tensorParallel) {
            throw new IllegalArgumentException("--tensor-model-parallel-size " + tensorParallel + " needs as many ranks; the"
                    + " launcher started " + backend.worldSize());
        }
        PrintStream out = System.out;
        Map<String, List<int[]>> generated = new LinkedHashMap<>();
        ProcessGroups pg = ProcessGroups.create(ParallelDims.of(tensorParallel, tensorParallel, 1), backend);
        boolean first = pg.worldRank() == 0;
        try (NDManager host = NDManager.newBaseManager(Device.cpu())) {
            ModelContext ctx = ModelContext.create(config, pg, root, new SeedScheme(1)).withDeviceInitialization();
            int[] layerNumbers = new int[layers];
            for (int i = 0; i < layers; i++) {
                layerNumbers[i] = i;
            }
            GptModel model = GptModel.build(ctx, LayerSpec.tensorParallel(), layerNumbers, true, true);
            long start = System.nanoTime();
            SafetensorsWeights.load(weights, model.namedParameters(""), host);
            if (first) {
                out.printf(Locale.ROOT, "mcore4j generate: %s, TP%d, %d layers, hidden %d, %d heads, %d query groups, ffn %d,"
                        + " vocab %d, %s, weights loaded in %.1f s%n", root.getDevice(), tensorParallel, layers, hidden, heads,
                        groups, ffn, vocab, config.dtype(), (System.nanoTime() - start) / 1e9);
            }
            Generator generator = new Generator(model);
            int largest = batchSizes.stream().mapToInt(Integer::intValue).max().orElse(1);
            ContinuousBatchingEngine served = !engine ? null : ContinuousBatchingEngine.start(model, EngineConfig.builder()
                    .maxNumSeqs(largest).maxModelLength(maxModelLength).cudaGraphs(!noCudaGraphs).build());
            try {
                for (int b : batchSizes) {
                    if (served != null && !served.isLeader()) {
                        break; // a follower runs the leader's plans on its engine thread
                    }
                    if (b > all.size()) {
                        throw new IllegalArgumentException("batch size " + b + " needs " + b + " prompts, the file has " + all.size());
                    }
                    List<int[]> batch = all.subList(0, b);
                    Generation run = served != null ? n -> throughEngine(served, batch, n)
                            : n -> generator.generate(batch, SamplingParams.greedy(n)).stream().map(Completion::tokens).toList();
                    run.generate(warmupTokens);
                    long t0 = System.nanoTime();
                    List<int[]> ids = run.generate(tokens);
                    double seconds = (System.nanoTime() - t0) / 1e9;
                    long count = ids.stream().mapToLong(t -> t.length).sum();
                    generated.put(String.valueOf(b), ids);
                    if (first) {
                        out.printf(Locale.ROOT, "mcore4j %s: TP%d, batch %d, prompt %d, %d new tokens: %.1f tokens/s"
                                        + " (%.2f ms per step, %.2f s)%n", served != null ? "engine" : "generate", tensorParallel,
                                b, batch.get(0).length, tokens, count / seconds, 1000 * seconds / tokens, seconds);
                    }
                }
            } finally {
                if (served != null) {
                    served.close();
                }
            }
        }
        return first ? generated : null;
    }
}
