package io.mcore4j.samples.pretrain;

import ai.djl.Device;
import ai.djl.ndarray.NDManager;
import io.mcore4j.core.CpuThreads;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.data.gpt.GptDatasetBuilder;
import io.mcore4j.data.gpt.GptSplits;
import io.mcore4j.data.gpt.SampleDataset;
import io.mcore4j.hf.HfCheckpoint;
import io.mcore4j.hf.HfConfig;
import io.mcore4j.hf.HfDtype;
import io.mcore4j.hf.HfExport;
import io.mcore4j.models.gpt.GptModel;
import io.mcore4j.parallel.Backend;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;
import io.mcore4j.parallel.launch.LaunchEnvironment;
import io.mcore4j.samples.generate.GenerateGpt;
import io.mcore4j.samples.launch.FailureReport;
import io.mcore4j.samples.launch.LaunchedRank;
import io.mcore4j.samples.launch.ParallelLayoutOptions;
import io.mcore4j.training.TrainingLoop;
import io.mcore4j.training.TrainingSummary;
import io.mcore4j.training.metrics.JsonlMetricsSink;
import io.mcore4j.training.metrics.LossCurveSink;
import io.mcore4j.training.metrics.MetricsSink;
import io.mcore4j.training.metrics.TensorBoardSink;
import io.mcore4j.training.gpt.GptPretraining;
import io.mcore4j.training.gpt.GptTrainingSetup;
import picocli.CommandLine;

import java.io.PrintStream;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Locale;
import java.util.function.Consumer;

/**
 * {@code pretrain-gpt}: trains a GPT with Megatron-LM-style flags ({@link PretrainArgs}) through the
 * library's training loop ({@link GptPretraining}).
 *
 * <p>Ranks: with {@code --nproc N} (and no launcher variables) N threads of this JVM are the ranks,
 * on the CPU; a single rank uses the GPU when CUDA is visible. Under torchrun
 * ({@code torchrun --no-python java ...}), srun or mpirun, each process is one rank: on its GPU over
 * NCCL when CUDA devices are visible, otherwise on the CPU over TCP, meeting at MASTER_ADDR:MASTER_PORT
 * (see {@link LaunchedRank}).
 *
 * <p>Exit codes: 0 done; 2 a bad flag or value (one line naming it); 1 the run failed (one line naming
 * the exception and its causes; {@code -Dmcore4j.stacktrace=true} adds the stack trace).
 */
public final class PretrainGpt {
    private PretrainGpt() {}

    /**
     * @param argv Megatron-LM-style flags; {@code --help} lists them
     */
    public static void main(String[] argv) {
        System.exit(execute("pretrain-gpt", argv, System.out, System.err, PretrainGpt::trainThenComplete));
    }

    /**
     * The command line's job: trains, and a byte-level run in this JVM ({@code --corpus-from-sources}
     * with {@code --save}, not launched as a rank) ends with what its model learned, a completion of
     * {@code public final class } from its last checkpoint (seeded sampling at a low temperature: greedy
     * decoding of so small a model repeats one byte). Not with LoRA, whose checkpoints hold only the adapters.
     *
     * @param args the parsed, checked flags
     * @param out where progress and the completion go
     * @throws Exception if a rank fails
     */
    public static void trainThenComplete(PretrainArgs args, PrintStream out) throws Exception {
        run(args, out);
        if (args.corpus != null && args.save != null && System.getenv("RANK") == null && args.lora.config() == null) {
            GenerateGpt.run(out, "--load", args.save.toString(), "--prompts", "public final class ", "--temperature", "0.7",
                    "--top_k", "20", "--seed", "1234", "--num-tokens-to-generate", "48",
                    "--num-attention-heads", String.valueOf(args.numAttentionHeads));
        }
    }

    /** A front-end's job once its flags are parsed. */
    @FunctionalInterface
    public interface Job {
        /**
         * @param args the parsed, checked flags
         * @param out standard output
         * @throws Exception if the job fails
         */
        void run(PretrainArgs args, PrintStream out) throws Exception;
    }

    /**
     * Parses the flags into a fresh {@link PretrainArgs} (plus the command's own options object, when
     * given), runs the job, and maps failures to exit codes.
     *
     * @return the exit code: 0, 2 for bad flags or values, 1 for a failed run
     */
    static int execute(String name, String[] argv, PrintStream out, PrintStream err, Job job) {
        return execute(name, new PretrainArgs(), null, List.of(), argv, out, err, job);
    }

    /**
     * Like {@link #execute(String, String[], PrintStream, PrintStream, Job)} for a front-end with its
     * own options object, which gets the pretrain-gpt flags as a mixin, and preset flags parsed before
     * the user's (the user's win).
     *
     * @param name the command's name in messages and usage
     * @param args receives the pretrain-gpt flags
     * @param extra the front-end's own picocli options object
     * @param presets flags parsed before {@code argv}
     * @param argv the command line
     * @param out standard output
     * @param err standard error
     * @param job the work
     * @return the exit code: 0, 2 for bad flags or values, 1 for a failed run
     */
    public static int execute(String name, PretrainArgs args, Object extra, List<String> presets, String[] argv,
                       PrintStream out, PrintStream err, Job job) {
        CommandLine cmd = new CommandLine(extra != null ? extra : args).setOverwrittenOptionsAllowed(true);
        if (extra != null) {
            cmd.addMixin("pretrain", args);
        }
        cmd.getCommandSpec().name(name);
        cmd.getCommandSpec().mixinStandardHelpOptions(true);
        try {
            String[] all = java.util.stream.Stream.concat(presets.stream(), java.util.Arrays.stream(argv))
                    .toArray(String[]::new);
            cmd.parseArgs(all);
            if (cmd.isUsageHelpRequested()) {
                cmd.usage(out);
                return 0;
            }
            if (cmd.isVersionHelpRequested()) {
                out.println(name + " " + Mcore4jVersion.get());
                return 0;
            }
            args.setup(); // every flag checked before anything is allocated
        } catch (CommandLine.ParameterException | IllegalArgumentException e) {
            // one line: the flag, the value and what was expected, then where the flags are listed
            err.println(name + ": " + FailureReport.oneLine(e.getMessage()) + " ('" + name + " --help' lists the flags)");
            return 2;
        } catch (RuntimeException e) {
            return FailureReport.report(name, e, err);
        }
        try {
            job.run(args, out);
            return 0;
        } catch (Exception | OutOfMemoryError e) {
            return FailureReport.report(name, e, err);
        }
    }

    /** The bad-input exception behind a failure (ranks wrap what they throw), or null. */
    private static IllegalArgumentException badInput(Throwable e) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (t instanceof IllegalArgumentException iae) {
                return iae;
            }
        }
        return null;
    }

    /**
     * Runs the job and returns the training losses the logging rank saw.
     *
     * @param args parsed flags
     * @param out where progress goes
     * @return per-iteration losses
     * @throws Exception if any rank fails
     */
    public static List<Double> run(PretrainArgs args, PrintStream out) throws Exception {
        return run(args, out, b -> {}, false).losses();
    }

    /**
     * Runs the job on every rank of this process.
     *
     * @param args parsed flags
     * @param out where the logging rank prints
     * @param loop further options of each rank's loop (a listener, more sinks)
     * @param timePhases synchronise the device between a step's phases and report their times
     * @return what the logging rank's run did (the first rank's where none logs)
     * @throws Exception if any rank fails
     */
    public static TrainingSummary run(PretrainArgs args, PrintStream out, Consumer<TrainingLoop.Builder> loop,
                                      boolean timePhases) throws Exception {
        return run(args, out, loop, timePhases, true);
    }

    /**
     * Runs the job on every rank of this process.
     *
     * @param args parsed flags
     * @param out where the logging rank prints
     * @param loop further options of each rank's loop (a listener, more sinks)
     * @param timePhases synchronise the device between a step's phases and report their times
     * @param writeMetrics write metrics.jsonl and loss.png (the benchmark does not)
     * @return what the logging rank's run did (the first rank's where none logs)
     * @throws Exception if any rank fails
     */
    public static TrainingSummary run(PretrainArgs args, PrintStream out, Consumer<TrainingLoop.Builder> loop,
                                      boolean timePhases, boolean writeMetrics) throws Exception {
        Mcore4j.ensureInitialized();
        Duration timeout = Duration.ofMillis((long) (args.timeoutMinutes * 60_000));
        boolean launched = ParallelLayoutOptions.launched();
        int world = args.layout.worldSize();
        boolean onCpu = !launched && world > 1 || !LaunchedRank.onGpu();
        if (args.autoLayout) {
            // sets the layout flags to the planner's best layout for the device the ranks run on
            AutoLayout.apply(args, world, onCpu ? Device.cpu() : Device.gpu(), out);
        }
        GptTrainingSetup setup = args.setup();
        // ranks sharing this machine's cores: this JVM's threads, or the launcher's processes on this node
        int sharing = launched ? LaunchEnvironment.fromSystem().localWorldSize() : world;
        CpuThreads threads = CpuThreads.choose(args.cpuThreads, sharing);
        if (onCpu || args.cpuThreads != null) { // a GPU run keeps libtorch's default unless told
            threads.apply();
        }
        if (onCpu) {
            out.println(threads.describe());
        }
        if (args.sequenceParallel && !args.sequenceParallelInEffect()) {
            out.println("warning: --sequence-parallel is off at --tensor-model-parallel-size 1 (as in Megatron)");
        }
        args.layout.checkWorld(world, setup.contextParallel()); // fails early, naming the flags
        setup.dims(world); // the same for the batch, and the model's shape against the layout
        if (args.tokenizer.type() != null && args.loadHf == null) {
            // Megatron's build_tokenizer lines
            int size = args.tokenVocabSize();
            int padded = setup.model().vocabSize();
            out.println("> building " + args.tokenizer.type().argument() + " tokenizer ...");
            out.printf(Locale.ROOT, " > padded vocab (size: %d) with %d dummy tokens (new size: %d)%n", size, padded - size, padded);
        }
        try (GptSplits splits = datasets(args, out)) {
            SampleDataset train = splits.train().orElseThrow(() -> new IllegalArgumentException("the data has no training split"));
            SampleDataset valid = args.evalInterval > 0 ? splits.valid().orElse(null) : null;
            if (launched || world == 1) {
                LaunchedRank rank = launched ? LaunchedRank.connect(timeout) : LaunchedRank.single(timeout);
                try (Backend backend = rank.backend(); NDManager root = NDManager.newBaseManager(rank.device())) {
                    return GptPretraining.run(setup, backend, root, train, valid,
                            rankOptions(args, out, loop, rank.device(), writeMetrics), timePhases, hfHooks(args, setup, out));
                }
            }
            List<TrainingSummary> perRank;
            try {
                perRank = InJvmWorld.run(world, timeout, rank -> GptPretraining.run(setup, rank.backend(), rank.manager(),
                        train, valid, rankOptions(args, out, loop, Device.cpu(), writeMetrics), timePhases, hfHooks(args, setup, out)));
            } catch (InJvmWorld.RankFailedException e) {
                IllegalArgumentException bad = badInput(e);
                throw bad != null ? bad : e; // a bad value the ranks found is the caller's error, not a crash
            }
            return perRank.stream().filter(s -> !s.losses().isEmpty()).findFirst().orElse(perRank.get(0));
        }
    }

    private static Consumer<TrainingLoop.Builder> rankOptions(PretrainArgs args, PrintStream out,
                                                             Consumer<TrainingLoop.Builder> extra, Device device,
                                                             boolean writeMetrics) {
        Path metricsDir = args.metricsDir != null ? args.metricsDir : args.save != null ? args.save : Path.of("runs", "pretrain-gpt");
        Double peak = args.peakTflops != null ? args.peakTflops : device.isGpu() ? Double.valueOf(989) : null;
        return b -> {
            b.out(out).peakTflops(peak).moePerLayerLogging(args.moe.perLayerLogging);
            if (writeMetrics) {
                Path jsonl = metricsDir.resolve("metrics.jsonl");
                LossCurveSink curve = new LossCurveSink(metricsDir.resolve("loss.png"), jsonl, "pretrain-gpt");
                b.sink(new JsonlMetricsSink(jsonl));
                if (args.tensorboardDir != null) {
                    b.sink(new TensorBoardSink(args.tensorboardDir));
                }
                b.sink(curve); // closed after the JSONL file, which it draws from
                b.sink(new MetricsSink() {
                    @Override
                    public void write(long iteration, java.util.Map<String, Double> scalars) {}

                    @Override
                    public void close() {
                        out.println("metrics: " + jsonl + (args.tensorboardDir != null ? ", TensorBoard: "
                                + args.tensorboardDir : "") + ", loss curve: "
                                + (curve.drawn() ? curve.png().toString() : "not drawn (" + curve.failure() + ")"));
                    }
                });
            }
            extra.accept(b);
        };
    }

    /**
     * {@code --load-hf} and {@code --save-hf}: the Hugging Face bridge around the loop. The weights
     * are imported after the chunks are built and before the optimizer copies them (each rank reads
     * only its own shards); the trained model is exported after the loop (collective), with the
     * tokenizer files of {@code --load-hf}.
     */
    private static GptPretraining.ModelHooks hfHooks(PretrainArgs args, GptTrainingSetup setup, PrintStream out) {
        return new GptPretraining.ModelHooks() {
            @Override
            public void beforeTraining(List<GptModel> chunks, ProcessGroups groups) {
                if (args.loadHf == null) {
                    return;
                }
                long start = System.nanoTime();
                try (HfCheckpoint ck = HfCheckpoint.open(args.loadHf)) {
                    ck.loadInto(chunks);
                }
                groups.world().barrier();
                if (groups.worldRank() == 0) {
                    out.printf(Locale.ROOT, " imported %s in %.2f s%n", args.loadHf, (System.nanoTime() - start) / 1e9);
                }
            }

            @Override
            public void afterTraining(List<GptModel> chunks, ProcessGroups groups) {
                HfConfig hf = args.saveHf == null && args.lora.saveHfAdapter == null ? null
                        : args.loadHf != null ? args.hfConfig() : HfConfig.forModel(setup.model(), args.tokenVocabSize());
                if (args.lora.saveHfAdapter != null) { // before --save-hf, which merges the adapters
                    long start = System.nanoTime();
                    HfExport.writeAdapter(args.lora.saveHfAdapter, hf, setup.lora(), chunks, groups.world());
                    if (groups.worldRank() == 0) {
                        out.printf(Locale.ROOT, " exported the LoRA adapter to %s in %.2f s%n", args.lora.saveHfAdapter,
                                (System.nanoTime() - start) / 1e9);
                    }
                }
                if (args.saveHf == null) {
                    return;
                }
                long start = System.nanoTime();
                HfExport.write(args.saveHf, hf, chunks, groups.world(), HfDtype.parse(args.saveHfDtype));
                if (groups.worldRank() == 0) {
                    if (args.loadHf != null) {
                        HfExport.copyTokenizerFiles(args.loadHf, args.saveHf);
                    }
                    out.printf(Locale.ROOT, " exported %s (%s) in %.2f s%n", args.saveHf, args.saveHfDtype,
                            (System.nanoTime() - start) / 1e9);
                }
            }
        };
    }

    private static GptSplits datasets(PretrainArgs args, PrintStream out) throws Exception {
        if (args.sft.enabled) {
            return args.sft.datasets(args, out);
        }
        long trainSamples = Math.max(args.trainIters, 1) * args.globalBatchSize;
        long validSamples = args.evalInterval > 0 ? (long) args.evalIters * args.globalBatchSize : 0;
        GptDatasetBuilder builder = GptDatasetBuilder.create().sequenceLength(args.seqLength).seed(args.seed)
                .split(args.splitWeights()).samples(trainSamples, validSamples, 0);
        if (args.dataCachePath != null) {
            builder.cacheDirectory(args.dataCachePath);
        }
        if (args.mockData) {
            builder.mock(args.tokenVocabSize());
        } else {
            // token ids at or above --vocab-size would train silently at TP > 1 (no rank owns their row)
            builder.vocabSize(args.tokenVocabSize());
        }
        if (args.mockData) {
            // mock tokens are drawn below --vocab-size
        } else if (args.corpus != null) {
            Path prefix = Path.of("runs", "corpus", "sources_text_document");
            int documents = SourceCorpus.build(args.corpus, prefix);
            out.println("corpus: " + documents + " documents from " + args.corpus.toAbsolutePath().normalize()
                    + " -> " + prefix + ".bin/.idx (byte-level tokens)");
            builder.dataPath(prefix.toString());
        } else {
            builder.dataPath(String.join(" ", args.dataPath));
        }
        return builder.build();
    }

    /** The project version from the jar's manifest. */
    static final class Mcore4jVersion {
        private Mcore4jVersion() {}

        static String get() {
            String v = PretrainGpt.class.getPackage().getImplementationVersion();
            return v != null ? v : "(development build)";
        }
    }
}
