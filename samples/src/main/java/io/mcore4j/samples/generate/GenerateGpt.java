package io.mcore4j.samples.generate;

import ai.djl.ndarray.NDManager;
import io.mcore4j.checkpoint.DistCheckpointing;
import io.mcore4j.checkpoint.LoadResult;
import io.mcore4j.checkpoint.StrictMode;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.data.tokenizer.ByteLevelTokenizer;
import io.mcore4j.data.tokenizer.Tokenizer;
import io.mcore4j.hf.HfCheckpoint;
import io.mcore4j.hf.HfConfig;
import io.mcore4j.inference.Completion;
import io.mcore4j.inference.Generator;
import io.mcore4j.inference.SamplingParams;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.gpt.GptModel;
import io.mcore4j.models.transformer.LayerSpec;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.parallel.Backend;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;
import io.mcore4j.pipeline.LayerAssignment;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.samples.launch.FailureReport;
import io.mcore4j.samples.launch.LaunchedRank;

import java.io.PrintStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Callable;

import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * {@code generate-gpt}: loads the newest checkpoint of a pretrain-gpt run into a GPT at the requested
 * tensor- and pipeline-parallel sizes (the checkpoint reshards on load; its layout does not matter) and
 * prints a completion of each prompt. The model's shape comes from the checkpoint's tensor shapes; only
 * the attention-head count is a flag. With {@code --load-hf} the model is a Hugging Face checkpoint
 * instead (any architecture the bridge imports: its shape from {@code config.json}, its weights read
 * straight from the safetensors at the requested layout). Ranks are threads of this JVM on CPU, or
 * launched processes (torchrun, srun, mpirun) as for pretrain-gpt. Flags follow Megatron-LM's inference flags.
 */
@Command(name = "generate-gpt", mixinStandardHelpOptions = true, sortOptions = false,
        description = "Prints completions of prompts from a pretrain-gpt checkpoint or a Hugging Face one (--load-hf).")
public final class GenerateGpt implements Callable<Integer> {
    @Option(names = "--load", paramLabel = "DIR",
            description = "a pretrain-gpt --save directory (its newest complete checkpoint) or one checkpoint directory")
    Path load;

    @Option(names = "--load-hf", paramLabel = "DIR",
            description = "a Hugging Face checkpoint (config.json + safetensors) instead of --load: the model's shape comes"
                    + " from config.json, so --num-attention-heads, --seq-length, --rotary-base and --norm-epsilon are not used")
    Path loadHf;

    @Option(names = "--prompts", required = true, arity = "1..*", paramLabel = "TEXT", description = "prompts, completed as one batch")
    List<String> prompts;

    @Option(names = "--num-tokens-to-generate", defaultValue = "64", description = "most new tokens per prompt (default: ${DEFAULT-VALUE})")
    int numTokensToGenerate;

    @Option(names = "--greedy", description = "always pick the most likely token (same as --top_k 1)")
    boolean greedy;

    @Option(names = "--temperature", defaultValue = "1.0", description = "logits divisor when sampling (default: ${DEFAULT-VALUE})")
    double temperature;

    @Option(names = "--top_k", defaultValue = "0", description = "sample among the k most likely tokens; 0 = all (default: ${DEFAULT-VALUE})")
    int topK;

    @Option(names = "--top_p", defaultValue = "0.0", description = "nucleus threshold; 0 = off (default: ${DEFAULT-VALUE})")
    double topP;

    @Option(names = "--seed", defaultValue = "1234", description = "seed of prompt i's generator is seed + i (default: ${DEFAULT-VALUE})")
    long seed;

    @Option(names = "--num-attention-heads", defaultValue = "4", description = "attention heads of the model (default: ${DEFAULT-VALUE}, the README's main job)")
    int heads;

    @Option(names = "--seq-length", defaultValue = "2048",
            description = "max positions of a rotary model; a learned position table's size is read from the checkpoint (default: ${DEFAULT-VALUE})")
    int seqLength;

    @Option(names = "--rotary-base", defaultValue = "10000", description = "RoPE base of a rotary model (default: ${DEFAULT-VALUE})")
    double rotaryBase;

    @Option(names = "--norm-epsilon", defaultValue = "1e-5", description = "norm epsilon (default: ${DEFAULT-VALUE})")
    double normEpsilon;

    @Option(names = "--tokenizer-model", paramLabel = "PATH",
            description = "a Hugging Face tokenizer.json (or its directory), run by DJL's tokenizers, which must be on the class path;"
                    + " default: the byte-level tokenizer of pretrain-gpt's corpus")
    Path tokenizerModel;

    @Option(names = "--tensor-model-parallel-size", defaultValue = "1", description = "(default: ${DEFAULT-VALUE})")
    int tensorParallel;

    @Option(names = "--pipeline-model-parallel-size", defaultValue = "1", description = "(default: ${DEFAULT-VALUE})")
    int pipelineParallel;

    @Option(names = "--distributed-timeout-seconds", defaultValue = "600", description = "(default: ${DEFAULT-VALUE})")
    int timeoutSeconds;

    /** Megatron's default --make-vocab-size-divisible-by, the padding of a --load-hf model's vocabulary. */
    private static final int HF_VOCAB_DIVISOR = 128;

    private PrintStream out = System.out;

    /**
     * Runs the command and exits with its code.
     *
     * @param argv flags; {@code --help} lists them
     */
    public static void main(String[] argv) {
        System.exit(new CommandLine(new GenerateGpt()).setExecutionExceptionHandler(FailureReport.handler("generate-gpt"))
                .execute(argv));
    }

    /**
     * Parses flags and runs, printing to {@code out}.
     *
     * @param out where completions go
     * @param argv flags
     * @return the exit code: 0 on success, 2 for bad flags or values (one line naming the flag), 1 for a failed run
     */
    public static int run(PrintStream out, String... argv) {
        return run(out, System.err, argv);
    }

    /**
     * Parses flags and runs, printing completions to {@code out} and failures to {@code err}.
     *
     * @param out where completions go
     * @param err where a failure's line goes
     * @param argv flags
     * @return the exit code: 0 on success, 2 for bad flags or values (one line naming the flag), 1 for a failed run
     */
    public static int run(PrintStream out, PrintStream err, String... argv) {
        GenerateGpt command = new GenerateGpt();
        command.out = out;
        return new CommandLine(command).setOut(new java.io.PrintWriter(out, true)).setErr(new java.io.PrintWriter(err, true))
                .setExecutionExceptionHandler(FailureReport.handler("generate-gpt")).execute(argv);
    }

    @Override
    public Integer call() throws Exception {
        checkFlags();
        SamplingParams params = greedy ? SamplingParams.greedy(numTokensToGenerate)
                : SamplingParams.sample(temperature, topK, topP, numTokensToGenerate, seed);
        CheckpointShapes checkpoint = loadHf == null ? CheckpointShapes.read(load) : null;
        HfConfig hf = null;
        if (loadHf != null) {
            try (HfCheckpoint ck = HfCheckpoint.openInput("--load-hf", loadHf, java.util.Set.of())) { // every tensor's header
                hf = ck.config();
            }
        }
        // a Hugging Face model's vocabulary is padded as pretrain-gpt pads it by default (128 x TP); padded ids are never picked
        TransformerConfig config = hf == null ? checkpoint.config(heads, seqLength, rotaryBase, normEpsilon)
                : hf.transformerConfig(HF_VOCAB_DIVISOR, tensorParallel, DataType.FLOAT32);
        Path source = hf == null ? checkpoint.directory() : loadHf;
        Mcore4j.ensureInitialized();
        int world = tensorParallel * pipelineParallel;
        boolean launched = System.getenv("RANK") != null || System.getenv("SLURM_PROCID") != null
                || System.getenv("OMPI_COMM_WORLD_RANK") != null;
        List<List<Completion>> perRank;
        List<int[]> ids = new ArrayList<>();
        try (Tokenizer tokenizer = tokenizer()) {
            for (String p : prompts) {
                ids.add(tokenizer.encode(p));
            }
            int vocabulary = Math.min(tokenizer.vocabularySize(), hf == null ? config.vocabSize() : hf.vocabSize());
            // an end-of-document id the model cannot produce (a byte-level tokenizer's 256 for a small
            // Hugging Face vocabulary) never stops a completion
            int eod = tokenizer.endOfDocument().isPresent() && tokenizer.endOfDocument().getAsInt() < vocabulary
                    ? tokenizer.endOfDocument().getAsInt() : -1;
            if (launched) {
                LaunchedRank rank = LaunchedRank.connect(Duration.ofSeconds(timeoutSeconds));
                try (Backend backend = rank.backend(); NDManager root = NDManager.newBaseManager(rank.device())) {
                    perRank = new ArrayList<>();
                    perRank.add(complete(config, source, backend, root, ids, vocabulary, eod, params));
                }
            } else {
                perRank = InJvmWorld.run(world, Duration.ofSeconds(timeoutSeconds),
                        rank -> complete(config, source, rank.backend(), rank.manager(), ids, vocabulary, eod, params));
            }
            List<Completion> completions = perRank.get(0);
            if (completions == null) {
                return 0; // launched, and not world rank 0: rank 0 prints
            }
            out.println("generate-gpt: " + source + (hf != null ? " (" + hf.architecture().className() + ")" : "") + ", " + config.numLayers() + " layers, hidden "
                    + config.hiddenSize() + ", vocab " + config.vocabSize() + ", TP" + tensorParallel + " x PP" + pipelineParallel);
            for (int i = 0; i < prompts.size(); i++) {
                Completion c = completions.get(i);
                out.println("prompt " + i + ": " + prompts.get(i));
                out.println("completion " + i + " (" + c.tokens().length + " tokens, " + c.finishReason() + "): "
                        + tokenizer.decode(c.tokens()));
            }
        }
        return 0;
    }

    /** The values picocli parses but cannot judge, and the input paths, checked before anything is loaded. */
    private void checkFlags() {
        if ((load == null) == (loadHf == null)) {
            throw new IllegalArgumentException(load == null ? "--load DIR or --load-hf DIR is required"
                    : "--load and --load-hf are alternatives; give one");
        }
        if (load != null && !Files.isDirectory(load)) {
            throw new IllegalArgumentException("--load " + load + (Files.exists(load) ? " is a file" : " does not exist")
                    + "; expected a pretrain-gpt --save directory or one checkpoint directory");
        }
        if (tokenizerModel != null && !Files.exists(tokenizerModel)) {
            throw new IllegalArgumentException("--tokenizer-model " + tokenizerModel + " does not exist; expected a tokenizer.json"
                    + " or its directory");
        }
        atLeast("--num-tokens-to-generate", numTokensToGenerate, 1);
        atLeast("--top_k", topK, 0);
        atLeast("--num-attention-heads", heads, 1);
        atLeast("--seq-length", seqLength, 1);
        atLeast("--tensor-model-parallel-size", tensorParallel, 1);
        atLeast("--pipeline-model-parallel-size", pipelineParallel, 1);
        atLeast("--distributed-timeout-seconds", timeoutSeconds, 1);
        if (!greedy && (!(temperature > 0) || Double.isInfinite(temperature))) {
            throw new IllegalArgumentException("--temperature " + temperature + " must be a positive finite number");
        }
        if (!(topP >= 0 && topP <= 1)) {
            throw new IllegalArgumentException("--top_p " + topP + " must be from 0 to 1");
        }
        if (!(rotaryBase > 0) || Double.isInfinite(rotaryBase)) {
            throw new IllegalArgumentException("--rotary-base " + rotaryBase + " must be a positive finite number");
        }
        if (!(normEpsilon > 0) || Double.isInfinite(normEpsilon)) {
            throw new IllegalArgumentException("--norm-epsilon " + normEpsilon + " must be a positive finite number");
        }
    }

    private static void atLeast(String flag, long value, long least) {
        if (value < least) {
            throw new IllegalArgumentException(flag + " " + value + " must be at least " + least);
        }
    }

    private Tokenizer tokenizer() throws Exception {
        if (tokenizerModel == null) {
            return new ByteLevelTokenizer();
        }
        try {
            return io.mcore4j.data.preprocess.HuggingFaceTokenizerAdapter.load(tokenizerModel, null);
        } catch (NoClassDefFoundError e) {
            throw new IllegalArgumentException("--tokenizer-model needs DJL's ai.djl.huggingface:tokenizers on the class path", e);
        }
    }

    private List<Completion> complete(TransformerConfig config, Path source, Backend backend, NDManager root,
                                      List<int[]> ids, int vocabulary, int eod, SamplingParams params) {
        ParallelDims dims = ParallelDims.of(backend.worldSize(), tensorParallel, pipelineParallel);
        config.validate(dims, 0);
        ProcessGroups groups = ProcessGroups.create(dims, backend);
        int stage = groups.pipelineRank();
        int[] layers = LayerAssignment.even(config.numLayers(), pipelineParallel, 1).layers(stage, 0);
        // the weights are overwritten by the checkpoint: draw the initial ones on the device, per rank
        ModelContext ctx = ModelContext.create(config, groups, root, new SeedScheme(seed)).withDeviceInitialization();
        GptModel model = GptModel.build(ctx, LayerSpec.tensorParallel(), layers, stage == 0, stage == pipelineParallel - 1);
        if (loadHf != null) {
            try (HfCheckpoint ck = HfCheckpoint.open(loadHf)) {
                ck.loadInto(List.of(model)); // this rank's rows and columns only
            }
        } else {
            List<ShardedTensor> targets = model.shardedState("model.");
            LoadResult loaded = DistCheckpointing.load(source, targets, groups.world(), StrictMode.RETURN_ALL);
            if (!loaded.missingKeys().isEmpty()) {
                throw new IllegalArgumentException("checkpoint " + source + " lacks " + loaded.missingKeys());
            }
        }
        List<Completion> completions = new Generator(model, vocabulary, eod).generate(ids, params);
        return groups.worldRank() == 0 ? completions : null;
    }
}
