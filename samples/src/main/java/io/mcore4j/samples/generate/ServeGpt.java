package io.mcore4j.samples.generate;

import ai.djl.ndarray.NDManager;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.data.chat.ChatTemplate;
import io.mcore4j.data.preprocess.HuggingFaceTokenizerAdapter;
import io.mcore4j.data.tokenizer.Tokenizer;
import io.mcore4j.inference.SerialGenerationEngine;
import io.mcore4j.inference.engine.ContinuousBatchingEngine;
import io.mcore4j.inference.engine.EngineConfig;
import io.mcore4j.inference.engine.GenerationEngine;
import io.mcore4j.models.gpt.GptModel;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.samples.launch.LaunchedRank;
import io.mcore4j.server.OpenAiServer;
import io.mcore4j.server.ServedModel;
import io.mcore4j.server.ServerConfig;
import io.mcore4j.server.ServingTokenizer;

import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.Callable;

import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

/**
 * {@code serve-gpt}: loads a model as {@code generate-gpt} does ({@code --load} or {@code --load-hf}) on one rank (the
 * GPU when CUDA is visible) and serves it over OpenAI's HTTP API (mcore4j-server): {@code /v1/completions},
 * {@code /v1/chat/completions}, {@code /v1/models}, {@code /health}, until the process is stopped. Flags follow
 * vLLM's {@code vllm serve} where one exists ({@code --host}, {@code --port}, {@code --served-model-name},
 * {@code --max-num-seqs}, {@code --chat-template}). The tokenizer is {@code --tokenizer-model}, else the
 * {@code --load-hf} directory's {@code tokenizer.json}, else the byte-level one; the chat template is
 * {@code --chat-template}, else the tokenizer's (none: the chat endpoint answers 400).
 */
@Command(name = "serve-gpt", mixinStandardHelpOptions = true, sortOptions = false,
        description = "Serves a pretrain-gpt checkpoint or a Hugging Face one (--load-hf) over OpenAI's HTTP API.")
public final class ServeGpt implements Callable<Integer> {
    @Mixin
    ModelSource model = new ModelSource();

    @Option(names = "--host", defaultValue = "0.0.0.0", description = "interface to listen on (default: ${DEFAULT-VALUE}, all)")
    String host;

    @Option(names = "--port", defaultValue = "8000", description = "TCP port; 0 picks a free one (default: ${DEFAULT-VALUE})")
    int port;

    @Option(names = "--served-model-name", paramLabel = "NAME",
            description = "the name clients give as \"model\" (default: the model directory's name)")
    String servedModelName;

    @Option(names = "--max-num-seqs", defaultValue = "0",
            description = "requests generated at once: the continuous engine's batch (0: 32); the serial engine runs 1"
                    + " (default: ${DEFAULT-VALUE})")
    int maxNumSeqs;

    @Option(names = "--max-model-len", defaultValue = "0",
            description = "the longest prompt plus new tokens of one request; the paged cache holds --max-num-seqs of them"
                    + " (default: 0, the model's maximum sequence length)")
    int maxModelLength;

    @Option(names = "--max-num-batched-tokens", defaultValue = "512",
            description = "tokens one continuous-engine step runs, decodes and prefill chunks together"
                    + " (default: ${DEFAULT-VALUE})")
    int maxNumBatchedTokens;

    @Option(names = "--engine", defaultValue = "continuous",
            description = "continuous (paged KV cache, continuous batching, CUDA graphs on GPUs) or serial (one request"
                    + " at a time through Generator: any model Generator runs) (default: ${DEFAULT-VALUE})")
    String engineKind;

    @Option(names = "--no-cuda-graphs", description = "run the continuous engine's decode steps eagerly on GPUs")
    boolean noCudaGraphs;

    @Option(names = "--max-queue", defaultValue = "64",
            description = "requests that may wait for the engine; more are answered 429 (default: ${DEFAULT-VALUE})")
    int maxQueue;

    @Option(names = "--chat-template", paramLabel = "FILE",
            description = "a Jinja chat template for /v1/chat/completions (default: the tokenizer's)")
    Path chatTemplate;

    @Option(names = "--tensor-model-parallel-size", defaultValue = "1",
            description = "serve-gpt runs one rank: 1 (default: ${DEFAULT-VALUE})")
    int tensorParallel;

    /** A model being served, and what {@link #close()} stops and frees. */
    public static final class Serving implements AutoCloseable {
        private final OpenAiServer server;
        private final GenerationEngine engine;
        private final Tokenizer tokenizer;
        private final NDManager parameters;

        private Serving(OpenAiServer server, GenerationEngine engine, Tokenizer tokenizer, NDManager parameters) {
            this.server = server;
            this.engine = engine;
            this.tokenizer = tokenizer;
            this.parameters = parameters;
        }

        /** @return the port the server listens on */
        public int port() {
            return server.port();
        }

        /** Stops taking requests, ends those open, then frees the engine, the tokenizer and the weights. */
        @Override
        public void close() {
            try {
                server.close();
            } finally {
                engine.close();
                tokenizer.close();
                parameters.close();
            }
        }
    }

    /**
     * Runs the command (serving until the process stops) and exits with its code.
     *
     * @param argv flags; {@code --help} lists them
     */
    public static void main(String[] argv) {
        System.exit(new CommandLine(new ServeGpt()).execute(argv));
    }

    /**
     * Parses the flags, loads the model and starts serving: for tests and programs that stop the server themselves.
     *
     * @param out where the startup line goes
     * @param argv flags
     * @return the running server
     * @throws Exception if a flag is wrong (IllegalArgumentException naming it) or the model cannot be loaded
     */
    public static Serving start(PrintStream out, String... argv) throws Exception {
        ServeGpt command = new ServeGpt();
        new CommandLine(command).parseArgs(argv);
        return command.serve(out);
    }

    @Override
    public Integer call() throws Exception {
        Serving serving = serve(System.out);
        Runtime.getRuntime().addShutdownHook(new Thread(serving::close, "serve-gpt-shutdown"));
        serving.server.join();
        return 0;
    }

    private Serving serve(PrintStream out) throws Exception {
        model.check();
        ModelSource.atLeast("--max-queue", maxQueue, 1);
        ModelSource.atLeast("--max-num-seqs", maxNumSeqs, 0);
        ModelSource.atLeast("--tensor-model-parallel-size", tensorParallel, 1);
        ModelSource.atLeast("--max-num-batched-tokens", maxNumBatchedTokens, 1);
        if (maxModelLength < 0) {
            throw new IllegalArgumentException("--max-model-len " + maxModelLength + " must be at least 0 (0: the model's)");
        }
        if (!engineKind.equals("continuous") && !engineKind.equals("serial")) {
            throw new IllegalArgumentException("--engine " + engineKind + " is not one of continuous, serial");
        }
        if (tensorParallel != 1) {
            throw new IllegalArgumentException("--tensor-model-parallel-size " + tensorParallel + ": serve-gpt runs one"
                    + " rank (expected 1)");
        }
        if (chatTemplate != null && !Files.isRegularFile(chatTemplate)) {
            throw new IllegalArgumentException("--chat-template " + chatTemplate + " is not a file; expected a Jinja template");
        }
        new ServerConfig(host, port, threads()); // the values checked before the model loads
        Path tokenizerPath = model.tokenizerModel != null ? model.tokenizerModel
                : model.loadHf != null && Files.isRegularFile(model.loadHf.resolve("tokenizer.json")) ? model.loadHf : null;
        Tokenizer tokenizer = tokenizerPath != null ? ModelSource.huggingFaceTokenizer(tokenizerPath) : model.tokenizer();
        Mcore4j.ensureInitialized();
        LaunchedRank rank = LaunchedRank.single(Duration.ofMinutes(10));
        NDManager parameters = NDManager.newBaseManager(rank.device());
        GenerationEngine engine = null;
        try (ModelSource.Resolved resolved = model.resolve(tensorParallel)) { // only the load reads its files
            ProcessGroups groups = ProcessGroups.create(ParallelDims.of(1, 1, 1), rank.backend());
            GptModel chunk = model.build(resolved, groups, parameters, 1234);
            int vocabulary = ModelSource.vocabulary(tokenizer, resolved);
            engine = engine(chunk, vocabulary, ModelSource.endOfDocument(tokenizer, vocabulary));
            ChatTemplate template = chatTemplate(tokenizerPath);
            ServingTokenizer serving = tokenizer instanceof HuggingFaceTokenizerAdapter hf ? ServingTokenizer.of(hf)
                    : ServingTokenizer.withoutSpecialTokens(tokenizer);
            String name = servedModelName != null ? servedModelName : resolved.directory().toAbsolutePath().normalize()
                    .getFileName().toString();
            OpenAiServer server = OpenAiServer.start(new ServedModel(name, engine, serving, template),
                    new ServerConfig(host, port, threads()));
            out.println("serve-gpt: " + resolved.describe() + ", " + resolved.config().numLayers() + " layers, hidden "
                    + resolved.config().hiddenSize() + ", vocab " + vocabulary + ", on " + rank.device() + "; serving \""
                    + name + "\" at http://" + host + ":" + server.port() + "/v1 (max " + maxQueue + " waiting"
                    + (template == null ? "; no chat template: /v1/chat/completions answers 400" : "") + ")");
            return new Serving(server, engine, tokenizer, parameters);
        } catch (Exception | Error e) {
            if (engine != null) {
                engine.close();
            }
            tokenizer.close();
            parameters.close();
            throw e;
        }
    }

    /**
     * The engine that serves the model: the one place an engine is chosen.
     *
     * @param chunk the whole model on this rank
     * @param vocabulary ids a token may take
     * @param endOfDocument the id that ends every request, or -1
     * @return the engine
     */
    private GenerationEngine engine(GptModel chunk, int vocabulary, int endOfDocument) {
        if (engineKind.equals("serial")) {
            if (maxNumSeqs > 1) {
                throw new IllegalArgumentException("--max-num-seqs " + maxNumSeqs + ": the serial engine generates one"
                        + " request at a time (expected 1, or --engine continuous)");
            }
            return new SerialGenerationEngine(chunk, vocabulary, endOfDocument, maxQueue);
        }
        EngineConfig config = EngineConfig.builder().maxNumSeqs(runningRequests()).maxWaitingRequests(maxQueue)
                .maxModelLength(maxModelLength).maxNumBatchedTokens(maxNumBatchedTokens).vocabularySize(vocabulary)
                .terminationId(endOfDocument).cudaGraphs(!noCudaGraphs).build();
        try {
            return ContinuousBatchingEngine.start(chunk, config);
        } catch (IllegalArgumentException refused) {
            throw new IllegalArgumentException("--engine continuous cannot serve this model: " + refused.getMessage()
                    + " (--engine serial runs any model generate-gpt runs)", refused);
        }
    }

    /** Requests generated at once: {@code --max-num-seqs}, or the continuous engine's default for 0. */
    private int runningRequests() {
        return maxNumSeqs > 0 ? maxNumSeqs : EngineConfig.DEFAULT_MAX_NUM_SEQS;
    }

    /** Jetty's pool: one thread per open request, more than the engine holds, so a full engine answers 429 first. */
    private int threads() {
        return runningRequests() + maxQueue + 32;
    }

    /** {@code --chat-template}, else the tokenizer's template, else none. */
    private ChatTemplate chatTemplate(Path tokenizerPath) throws Exception {
        if (tokenizerPath != null) {
            return ChatTemplate.find(tokenizerPath, chatTemplate).orElse(null);
        }
        return chatTemplate == null ? null : ChatTemplate.of(Files.readString(chatTemplate, StandardCharsets.UTF_8),
                chatTemplate.toString(), Map.of());
    }
}
