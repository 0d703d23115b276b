package io.mcore4j.samples.generate;

import ai.djl.ndarray.NDManager;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.data.tokenizer.Tokenizer;
import io.mcore4j.inference.Completion;
import io.mcore4j.inference.Generator;
import io.mcore4j.inference.SamplingParams;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.gpt.GptModel;
import io.mcore4j.parallel.Backend;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;
import io.mcore4j.samples.launch.FailureReport;
import io.mcore4j.samples.launch.LaunchedRank;
import io.mcore4j.samples.launch.ParallelLayoutOptions;

import java.io.PrintStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Callable;

import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
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
    @Mixin
    ModelSource model = new ModelSource();

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

    @Option(names = "--tensor-model-parallel-size", defaultValue = "1", description = "(default: ${DEFAULT-VALUE})")
    int tensorParallel;

    @Option(names = "--pipeline-model-parallel-size", defaultValue = "1", description = "(default: ${DEFAULT-VALUE})")
    int pipelineParallel;

    @Option(names = "--distributed-timeout-seconds", defaultValue = "600", description = "(default: ${DEFAULT-VALUE})")
    int timeoutSeconds;

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
        Mcore4j.ensureInitialized();
        int world = tensorParallel * pipelineParallel;
        boolean launched = ParallelLayoutOptions.launched();
        List<List<Completion>> perRank;
        List<int[]> ids = new ArrayList<>();
        try (ModelSource.Resolved resolved = model.resolve(tensorParallel); Tokenizer tokenizer = model.tokenizer()) {
            for (String p : prompts) {
                ids.add(tokenizer.encode(p));
            }
            int vocabulary = ModelSource.vocabulary(tokenizer, resolved);
            int eod = ModelSource.endOfDocument(tokenizer, vocabulary);
            if (launched) {
                LaunchedRank rank = LaunchedRank.connect(Duration.ofSeconds(timeoutSeconds));
                try (Backend backend = rank.backend(); NDManager root = NDManager.newBaseManager(rank.device())) {
                    perRank = new ArrayList<>();
                    perRank.add(complete(resolved, backend, root, ids, vocabulary, eod, params));
                }
            } else {
                perRank = InJvmWorld.run(world, Duration.ofSeconds(timeoutSeconds),
                        rank -> complete(resolved, rank.backend(), rank.manager(), ids, vocabulary, eod, params));
            }
            List<Completion> completions = perRank.get(0);
            if (completions == null) {
                return 0; // launched, and not world rank 0: rank 0 prints
            }
            TransformerConfig config = resolved.config();
            out.println("generate-gpt: " + resolved.describe() + ", " + config.numLayers() + " layers, hidden "
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
        model.check();
        ModelSource.atLeast("--num-tokens-to-generate", numTokensToGenerate, 1);
        ModelSource.atLeast("--top_k", topK, 0);
        ModelSource.atLeast("--tensor-model-parallel-size", tensorParallel, 1);
        ModelSource.atLeast("--pipeline-model-parallel-size", pipelineParallel, 1);
        ModelSource.atLeast("--distributed-timeout-seconds", timeoutSeconds, 1);
        if (!greedy && (!(temperature > 0) || Double.isInfinite(temperature))) {
            throw new IllegalArgumentException("--temperature " + temperature + " must be a positive finite number");
        }
        if (!(topP >= 0 && topP <= 1)) {
            throw new IllegalArgumentException("--top_p " + topP + " must be from 0 to 1");
        }
    }

    private List<Completion> complete(ModelSource.Resolved resolved, Backend backend, NDManager root,
                                      List<int[]> ids, int vocabulary, int eod, SamplingParams params) {
        ParallelDims dims = ParallelDims.of(backend.worldSize(), tensorParallel, pipelineParallel);
        resolved.config().validate(dims, 0);
        ProcessGroups groups = ProcessGroups.create(dims, backend);
        GptModel chunk = model.build(resolved, groups, root, seed);
        List<Completion> completions = new Generator(chunk, vocabulary, eod).generate(ids, params);
        return groups.worldRank() == 0 ? completions : null;
    }
}
