package io.mcore4j.inference;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.GraphOptimization;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.gpt.GptModel;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ProcessGroups;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * Generates text from this rank's chunk of a GPT, through the layers it was trained with, each layer
 * keeping its keys and values in a {@link KvCache}. Every rank of the model's tensor- and
 * pipeline-parallel groups calls the same methods with the same prompts (a collective over both
 * groups); every rank returns the same completions.
 *
 * <p><b>Steps.</b> The first pass runs every prompt up to the length of the shortest one; each later
 * pass runs one token per sequence: the sequence's next prompt token while it has one left (Megatron's
 * scheme for prompts of different lengths: every sequence keeps its own positions and no padding is ever
 * attended), otherwise the token picked from the previous pass's logits. On the last pipeline stage the
 * last position's logits are gathered over tensor-parallel ranks, every rank picks the same tokens from
 * them with each request's own generator ({@link SamplingParams}), and the picked tokens are broadcast
 * from the last stage to the others. Stage activations go forward point to point.
 *
 * <p><b>Native calls.</b> Decoding one token is bound by the host's cost per native call, not by the
 * device: each dense layer runs its pass in one call ({@link CachedLayer}, on the layer's own parameters,
 * with rotary tables computed once per generation), so a step costs a few dozen calls; the only host
 * synchronisation per step is reading the picked ids (greedy picks on the device). By default the layer
 * module has the same shapes on every decode step and {@link #generate} runs it under libtorch's graph
 * executor optimisation, which specialises and fuses it once; {@link #fuse(boolean) fuse(false)} runs the
 * module over caches narrowed to the length reached with the optimisation off. {@link #generate} sets the
 * optimisation on its thread while it runs ({@link GraphOptimization}; the system property
 * {@value GraphOptimization#DJL_PROPERTY}, when set, wins) and restores the thread's default afterwards.
 *
 * <p><b>Memory and autograd.</b> Every pass runs in a no-grad scope ({@link AutogradScope#openNoGrad}):
 * nothing is recorded and dropout is off. The caches and every temporary live in a manager under the
 * model's parameter manager that is closed when the call returns. Not thread-safe: one generator per
 * rank.
 */
public final class Generator {
    private final GptModel model;
    private final ModelContext ctx;
    private final ProcessGroups groups;
    private final int vocabularySize;
    private final int terminationId;
    private final CachedAttention attention;
    /** The one-call layer modules, loaded on first use: caches narrowed to the length reached, and static shapes. */
    private CachedLayer narrowedLayers;
    private CachedLayer staticLayers;
    /** Whether {@link #generate} runs dense layers in one native call each; false only to compare with the op-by-op path. */
    private boolean fusedLayers = true;
    /** Static-shape layers under libtorch's graph optimisation (true), or narrowed caches without it. */
    private boolean fuse = fuseDefault();

    /**
     * A generator that picks among every id of the model's (padded) vocabulary and stops only at each
     * request's token budget.
     *
     * @param model this rank's chunk (one chunk per rank: no virtual pipeline stages)
     */
    public Generator(GptModel model) {
        this(model, model.context().config().vocabSize(), -1);
    }

    /**
     * @param model this rank's chunk (one chunk per rank: no virtual pipeline stages)
     * @param vocabularySize ids a token may take: the tokenizer's vocabulary, so that the rows added by
     *     padding the vocabulary are never picked
     * @param terminationId the end-of-sequence id that stops a request (Megatron's {@code termination_id}),
     *     or -1 for none
     * @throws IllegalArgumentException if the vocabulary size exceeds the model's or the id lies outside it
     */
    public Generator(GptModel model, int vocabularySize, int terminationId) {
        this.model = model;
        this.ctx = model.context();
        this.groups = ctx.groups();
        int modelVocabulary = ctx.config().vocabSize();
        if (vocabularySize < 1 || vocabularySize > modelVocabulary) {
            throw new IllegalArgumentException("vocabulary size " + vocabularySize + " must be in [1, "
                    + modelVocabulary + "], the model's padded vocabulary");
        }
        if (terminationId < -1 || terminationId >= vocabularySize) {
            throw new IllegalArgumentException("termination id " + terminationId + " must be -1 (none) or in [0, "
                    + vocabularySize + ")");
        }
        if (model.isPreProcess() != groups.isFirstStage() || model.isPostProcess() != groups.isLastStage()) {
            throw new IllegalArgumentException("generation runs one chunk per rank: the chunk must hold the embedding"
                    + " exactly on the first pipeline stage and the output layer exactly on the last");
        }
        this.vocabularySize = vocabularySize;
        this.terminationId = terminationId;
        this.attention = new CachedAttention(ctx.parameters());
    }

    /** System property that picks {@link #fuse(boolean)}'s default: {@code true} unless set to {@code false}. */
    public static final String FUSE_PROPERTY = "mcore4j.inference.fuse";

    private static boolean fuseDefault() {
        return Boolean.parseBoolean(System.getProperty(FUSE_PROPERTY, "true"));
    }

    /**
     * Chooses how a one-call dense layer runs. {@code true} (the default, or {@code -Dmcore4j.inference.fuse=true}):
     * the layer module attends over the whole preallocated caches under a mask of the filled positions, so its
     * tensors have the same shapes on every decode step, and {@link #generate} runs with libtorch's graph-executor
     * optimisation on: the profiling executor specialises the module once per pass length (the prefill, then
     * single tokens) and runs its optimised graph with fused element-wise kernels on GPUs. {@code false}
     * ({@code -Dmcore4j.inference.fuse=false}): the module attends over the caches narrowed to the length
     * reached (new shapes on every step), interpreted op by op with the optimisation off. Both give the same
     * logits (up to summation order); which is faster depends on the host and device, so both stay available.
     *
     * @param fuse static shapes with graph optimisation, or narrowed caches without it
     * @return this generator
     */
    public Generator fuse(boolean fuse) {
        this.fuse = fuse;
        return this;
    }

    /** @return whether {@link #generate} runs static-shape layers under libtorch's graph optimisation */
    boolean fuses() {
        return fuse && fusedLayers;
    }

    /**
     * Greedy completion of one prompt, without a termination token: the library call behind "print what
     * the model learned". A collective over the model's tensor- and pipeline-parallel groups.
     *
     * @param model this rank's chunk
     * @param prompt token ids, at least one
     * @param numTokens tokens to generate
     * @return the generated ids (on every rank)
     */
    public static int[] greedy(GptModel model, int[] prompt, int numTokens) {
        return new Generator(model).generate(List.of(prompt), SamplingParams.greedy(numTokens)).get(0).tokens();
    }

    /**
     * Completes a batch of prompts with the same parameters; request {@code i} draws from its own
     * generator seeded with {@code params.seed() + i}.
     *
     * @param prompts token ids per request, each non-empty
     * @param params how tokens are picked and how many
     * @return one completion per prompt, in order
     */
    public List<Completion> generate(List<int[]> prompts, SamplingParams params) {
        List<SamplingParams> each = new ArrayList<>(prompts.size());
        for (int i = 0; i < prompts.size(); i++) {
            each.add(params.withSeed(params.seed() + i));
        }
        return generate(prompts, each);
    }

    /**
     * Completes a batch of prompts, each with its own parameters. A request's tokens do not depend on
     * the other requests of the batch (up to floating-point summation order).
     *
     * @param prompts token ids per request, each non-empty
     * @param params per request: how tokens are picked and how many
     * @return one completion per prompt, in order
     * @throws IllegalArgumentException if the lists differ in size, a prompt is empty or holds an id
     *     outside the vocabulary, or a prompt and its tokens exceed the model's max sequence length
     */
    public List<Completion> generate(List<int[]> prompts, List<SamplingParams> params) {
        int b = prompts.size();
        if (b == 0 || params.size() != b) {
            throw new IllegalArgumentException(b + " prompts need as many sampling parameters (got " + params.size()
                    + ") and at least one prompt");
        }
        int[] lengths = new int[b];
        int shortest = Integer.MAX_VALUE;
        int total = 0;
        boolean allGreedy = true;
        for (int i = 0; i < b; i++) {
            int[] p = prompts.get(i);
            if (p.length == 0) {
                throw new IllegalArgumentException("prompt " + i + " is empty: generation needs at least one token");
            }
            for (int k = 0; k < p.length; k++) {
                if (p[k] < 0 || p[k] >= vocabularySize) {
                    throw new IllegalArgumentException("prompt " + i + " holds id " + p[k] + " at position " + k
                            + ", outside the vocabulary [0, " + vocabularySize + ")");
                }
            }
            lengths[i] = p.length;
            shortest = Math.min(shortest, p.length);
            total = Math.max(total, p.length + params.get(i).numTokensToGenerate());
            allGreedy &= params.get(i).isPlainGreedy();
        }
        int limit = ctx.config().maxSequenceLength();
        if (total > limit) {
            throw new IllegalArgumentException("a prompt and its tokens to generate need " + total
                    + " positions, more than the model's max sequence length " + limit);
        }
        int[][] tokens = new int[b][total];
        TokenSampler[] samplers = new TokenSampler[b];
        for (int i = 0; i < b; i++) {
            System.arraycopy(prompts.get(i), 0, tokens[i], 0, lengths[i]);
            samplers[i] = new TokenSampler(params.get(i), prompts.get(i));
        }
        int[] generated = new int[b];
        Completion.FinishReason[] finished = new Completion.FinishReason[b];
        int running = b;
        // static shapes are specialised once and fused under libtorch's profiling executor; narrowed caches change
        // shape every step and would be re-specialised on every call (slower than the plain interpreter)
        GraphOptimization optimization = GraphOptimization.set(fuse && fusedLayers);
        try (NDManager manager = ctx.parameters().newSubManager()) {
            KvCache cache = newCache(manager, b, total, fusedLayers);
            int start = 0;
            for (int t = shortest; t < total && running > 0; t++) {
                int[] next;
                try (AutogradScope scope = AutogradScope.openNoGrad(manager)) {
                    NDArray logits = step(scope, cache, columns(tokens, start, t), true);
                    next = pick(scope, logits, lengths, finished, t, samplers, allGreedy);
                }
                for (int i = 0; i < b; i++) {
                    if (t < lengths[i]) {
                        continue; // still reading its prompt
                    }
                    if (finished[i] != null) {
                        tokens[i][t] = Math.max(terminationId, 0); // never read back: the request is done
                        continue;
                    }
                    tokens[i][t] = next[i];
                    if (next[i] == terminationId) {
                        finished[i] = Completion.FinishReason.TERMINATION_TOKEN;
                    } else {
                        generated[i]++;
                        if (generated[i] == params.get(i).numTokensToGenerate()) {
                            finished[i] = Completion.FinishReason.LENGTH;
                        }
                    }
                    running -= finished[i] != null ? 1 : 0;
                }
                start = t;
            }
        } finally {
            optimization.close();
        }
        List<Completion> out = new ArrayList<>(b);
        for (int i = 0; i < b; i++) {
            out.add(new Completion(Arrays.copyOfRange(tokens[i], lengths[i], lengths[i] + generated[i]), finished[i]));
        }
        return out;
    }

    /**
     * A cache for a batch, owned by {@code manager}, to drive {@link #step} directly.
     *
     * @param manager owner of the cache's tensors (under the model's parameter manager, on its device)
     * @param batchSize sequences
     * @param maxSequenceLength positions per sequence
     * @return the cache, at position 0
     */
    public KvCache newCache(NDManager manager, int batchSize, int maxSequenceLength) {
        return newCache(manager, batchSize, maxSequenceLength, true);
    }

    /**
     * Chooses how {@link #generate} runs dense layers (tests and benchmarks compare the two).
     *
     * @param fused one native call per layer ({@link CachedLayer}, the default) or op by op
     * @return this generator
     */
    Generator fusedLayers(boolean fused) {
        this.fusedLayers = fused;
        return this;
    }

    /**
     * As {@link #newCache(NDManager, int, int)}, choosing how dense layers run.
     *
     * @param manager owner of the cache's tensors
     * @param batchSize sequences
     * @param maxSequenceLength positions per sequence
     * @param fusedLayers whether a dense layer runs in one native call ({@link CachedLayer}) or op by op
     * @return the cache, at position 0
     */
    KvCache newCache(NDManager manager, int batchSize, int maxSequenceLength, boolean fusedLayers) {
        CachedLayer layers = null;
        if (fusedLayers && fuse) {
            staticLayers = staticLayers != null ? staticLayers : new CachedLayer(ctx.parameters(), true);
            layers = staticLayers;
        } else if (fusedLayers) {
            narrowedLayers = narrowedLayers != null ? narrowedLayers : new CachedLayer(ctx.parameters(), false);
            layers = narrowedLayers;
        }
        return new KvCache(manager, attention, layers, ctx.config(), groups.tp(), batchSize,
                maxSequenceLength);
    }

    /**
     * One pass: runs {@code tokens} (per sequence, the next {@code s} tokens) through this rank's chunk
     * with the cache, forwards the activations to the next pipeline stage, and advances the cache. A
     * collective over the tensor- and pipeline-parallel groups.
     *
     * @param scope a no-grad scope owning the result
     * @param cache the batch's cache on this rank
     * @param tokens [b][s] token ids, the same on every rank
     * @param lastPositionOnly return the logits of the pass's last position only
     * @return on the last pipeline stage the logits over the whole (padded) vocabulary, gathered over
     *     tensor-parallel ranks, [b, V] or [s, b, V] in the model's dtype; null on other stages
     */
    public NDArray step(AutogradScope scope, KvCache cache, int[][] tokens, boolean lastPositionOnly) {
        int b = tokens.length;
        int s = tokens[0].length;
        NDManager m = scope.manager();
        TransformerConfig c = ctx.config();
        NDArray ids = null;
        NDArray input = null;
        if (model.isPreProcess()) {
            long[] flat = new long[s * b];
            for (int k = 0; k < s; k++) {
                for (int i = 0; i < b; i++) {
                    flat[k * b + i] = tokens[i][k];
                }
            }
            ids = m.create(flat, new Shape(s, b));
        } else {
            Communicator pp = groups.pp();
            input = pp.recv(new Shape(s, b, c.hiddenSize()), c.dtype(), pp.rank() - 1, m);
        }
        NDArray out = model.inferenceForward(scope, ids, input, cache);
        cache.advance(s);
        if (!model.isPostProcess()) {
            Communicator pp = groups.pp();
            pp.send(out, pp.rank() + 1);
            scope.release(ids, input, out);
            return null;
        }
        NDArray local = lastPositionOnly ? out.get(s - 1) : out;
        local.attach(m);
        int dim = lastPositionOnly ? 1 : 2;
        NDArray logits = groups.tp().size() == 1 ? local : groups.tp().allGather(local, dim, m);
        scope.release(ids, input, out == logits ? null : out, local == logits ? null : local);
        return logits;
    }

    /**
     * The next token of every request (meaningful for those generating at position {@code t}): picked on
     * the last stage from the last position's logits [b, V], broadcast to the other stages.
     */
    private int[] pick(AutogradScope scope, NDArray logits, int[] lengths, Completion.FinishReason[] finished, int t,
                       TokenSampler[] samplers, boolean allGreedy) {
        int b = lengths.length;
        int[] next = new int[b];
        NDManager m = scope.manager();
        if (logits != null) {
            TokenSampler[] picking = new TokenSampler[b];
            for (int i = 0; i < b; i++) {
                if (t >= lengths[i] && finished[i] == null) {
                    // only a request that generates draws: its draws never depend on the rest of the batch
                    picking[i] = samplers[i];
                }
            }
            next = pickFromLastPosition(logits, picking, !allGreedy, null);
        }
        Communicator pp = groups.pp();
        if (pp.size() > 1) {
            long[] asLong = new long[b];
            for (int i = 0; i < b; i++) {
                asLong[i] = next[i];
            }
            NDArray sent = m.create(asLong);
            long[] received = pp.broadcast(sent, pp.size() - 1, m).toLongArray();
            for (int i = 0; i < b; i++) {
                next[i] = (int) received[i];
            }
        }
        return next;
    }

    /**
     * The picks from the last position's logits, on the stage that has them: with the rows on the device, every
     * row's argmax (b ids cross to the host instead of b rows of logits, and no sampler is asked); otherwise each
     * picking row's sampler draws from its row on the host, penalising the row in place.
     *
     * @param logits {@code [b, V]} over the model's (padded) vocabulary; the generator's first {@code vocabularySize}
     *     ids are the candidates
     * @param samplers per row, the sampler of a request that picks now, or null for a row that picks nothing
     * @param onHost whether the rows cross to the host (a request samples, or wants log-probabilities)
     * @param rows null, or receives per row the row its sampler drew from (the penalised logits that
     *     {@link TokenSampler#logprob} reads)
     * @return per row the picked id; 0 for a row that picked nothing on the host
     */
    int[] pickFromLastPosition(NDArray logits, TokenSampler[] samplers, boolean onHost, float[][] rows) {
        int b = samplers.length;
        int[] next = new int[b];
        NDArray candidates = vocabularySize == ctx.config().vocabSize() ? logits : logits.get(":, :{}", vocabularySize);
        if (!onHost) {
            long[] best = candidates.argMax(1).toLongArray();
            for (int i = 0; i < b; i++) {
                next[i] = (int) best[i];
            }
            return next;
        }
        float[] all = candidates.toType(DataType.FLOAT32, false).toFloatArray();
        // one row is drawn from as it came; several share one buffer unless their rows are kept
        float[] shared = b > 1 && rows == null ? new float[vocabularySize] : null;
        for (int i = 0; i < b; i++) {
            if (samplers[i] == null) {
                continue;
            }
            float[] row = b == 1 ? all : shared != null ? shared : new float[vocabularySize];
            if (b > 1) {
                System.arraycopy(all, i * vocabularySize, row, 0, vocabularySize);
            }
            next[i] = samplers[i].next(row, vocabularySize);
            if (rows != null) {
                rows[i] = row;
            }
        }
        return next;
    }

    /** Columns {@code from..to-1} of every row. */
    private static int[][] columns(int[][] tokens, int from, int to) {
        int[][] out = new int[tokens.length][];
        for (int i = 0; i < tokens.length; i++) {
            out[i] = Arrays.copyOfRange(tokens[i], from, to);
        }
        return out;
    }
}
