package io.mcore4j.models.gpt;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.contextparallel.ContextParallelSplit;
import io.mcore4j.core.PackedSequences;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.autograd.Cast;
import io.mcore4j.core.autograd.Function;
import io.mcore4j.core.autograd.FunctionContext;
import io.mcore4j.core.kernel.CrossEntropyKernel;
import io.mcore4j.core.kernel.Kernels;
import io.mcore4j.core.nn.AbstractModule;
import io.mcore4j.core.nn.ForwardPreHook;
import io.mcore4j.core.nn.GradientReadyListener;
import io.mcore4j.core.nn.ParameterResidency;
import io.mcore4j.core.nn.ModuleList;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.transformer.InferenceContext;
import io.mcore4j.models.transformer.LayerSpec;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.models.transformer.Norm;
import io.mcore4j.models.transformer.RecomputeSegment;
import io.mcore4j.models.transformer.TokenPositions;
import io.mcore4j.models.transformer.TransformerLayer;
import io.mcore4j.moe.AuxLossAutoScaler;
import io.mcore4j.moe.MoeLayer;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ReduceOp;
import io.mcore4j.tensorparallel.ColumnParallelLinear;
import io.mcore4j.tensorparallel.VocabParallelCrossEntropy;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.function.UnaryOperator;

/**
 * One pipeline chunk of a GPT: the embedding if it is the first chunk of the model, a run of
 * transformer layers (by global index), and the final norm, output layer and loss if it is the
 * last. Activations are [s, b, h] ([s/TP, b, h] with sequence parallelism); tokens and labels [s, b].
 *
 * <p>With tied embeddings the output layer multiplies by the word embedding weight. When the
 * embedding and the output layer sit on different pipeline stages, the last stage holds a copy
 * initialised identically (same key, same seed); its gradient must be summed with the first
 * stage's over the embedding group ({@link #sharedEmbeddingParameters()}), and in checkpoints it is
 * a non-main replica of the embedding, named after the embedding weight it mirrors.
 *
 * <p>Keys: {@code embedding.*}, {@code decoder.layers.<global index>.*},
 * {@code decoder.final_layernorm.*}, {@code output_layer.*}, and with multi-token prediction
 * {@code mtp.layers.<depth>.*} ({@link MultiTokenPrediction}, whose loss joins the main loss's gradient but not
 * the returned loss). Copies held by several data-parallel
 * ranks are main replicas only on DP rank 0 (layers mark their own: MoE experts differ across DP
 * ranks).
 */
public final class GptModel extends AbstractModule {
    private static final String OUTPUT_KEY = "output_layer.";
    private static final Function LAYER_BOUNDARY = new LayerBoundary(List.of(), List.of(), List.of(), List.of());

    private final ModelContext ctx;
    private final GptEmbedding embedding;
    private final ModuleList<TransformerLayer> layers;
    private final Norm finalNorm;
    private final ColumnParallelLinear output;
    private final ColumnParallelLinear tiedOutput;
    /** Multi-token prediction's depths (on the last chunk, with {@link TransformerConfig#mtp()}), or null. */
    private final MultiTokenPrediction mtp;
    private final boolean outputIsEmbeddingCopy;
    /** The device's cross-entropy kernel (looked up once, not every step), or null. */
    private final CrossEntropyKernel crossEntropyKernel;
    private final List<GradientReadyListener> gradientListeners = new CopyOnWriteArrayList<>();
    private final List<ForwardPreHook> forwardPreHooks = new CopyOnWriteArrayList<>();
    private final List<ParameterResidency> residencies = new CopyOnWriteArrayList<>();
    /** Per layer of this chunk, its parameters; the embedding's; the head's (the tied word weight included): what the hooks are told. */
    private final List<List<Parameter>> layerParameters;
    private final List<Parameter> embeddingParameters;
    private final List<Parameter> headReads;
    /** The head's own parameters (the tied word weight left out: the embedding's backward still adds to it). */
    private final List<Parameter> headParameters;
    /** Per recomputed run of layers, their parameters: what the run reads and its boundary reports. */
    private final Map<RecomputeSegment, List<Parameter>> recomputedReads;
    /** How training runs this chunk's layers: as full recompute cuts them (every layer a plain run without it). */
    private final List<RecomputeSegment> segments;
    /** How generation runs them: every layer a plain run. */
    private final List<RecomputeSegment> plainSegments;

    private GptModel(ModelContext ctx, LayerSpec spec, int[] layerNumbers, boolean preProcess, boolean postProcess) {
        TransformerConfig c = ctx.config();
        this.ctx = ctx;
        // copies held by several data- or context-parallel ranks are main replicas only on rank 0 of dp-cp
        boolean dpReplica = ctx.groups().dpCp().rank() > 0;
        this.embedding = preProcess ? registerModule("", new GptEmbedding(ctx), dpReplica) : null;
        this.layers = registerModule("decoder.layers.", new ModuleList<>());
        for (int n : layerNumbers) {
            layers.put(n, new TransformerLayer(ctx, spec, n));
        }
        this.segments = List.copyOf(RecomputeSegment.of(c, layerNumbers.length));
        this.plainSegments = List.copyOf(RecomputeSegment.plain(layerNumbers.length));
        if (postProcess) {
            this.finalNorm = registerModule("decoder.final_layernorm.", new Norm(ctx, c.hiddenSize()), dpReplica);
            boolean reuseEmbedding = c.tiedEmbeddings() && preProcess;
            this.outputIsEmbeddingCopy = c.tiedEmbeddings() && !preProcess;
            String key = c.tiedEmbeddings() ? GptEmbedding.WORD_KEY : OUTPUT_KEY;
            ColumnParallelLinear.Builder head = ColumnParallelLinear.builder(c.hiddenSize(), c.vocabSize(), ctx.groups().tp())
                    .bias(false).gatherOutput(false).sequenceParallel(c.sequenceParallel()).dtype(c.dtype())
                    .manager(ctx.parameters()).name(key);
            // with the embedding on this chunk the output layer has no weight of its own: it is given the embedding's
            this.output = reuseEmbedding ? null : registerModule(outputIsEmbeddingCopy ? GptEmbedding.WORD_KEY : OUTPUT_KEY,
                    head.initializer(ctx.initializer(key + "weight", c.initStd())).build(), dpReplica || outputIsEmbeddingCopy);
            this.tiedOutput = reuseEmbedding ? head.skipWeightAllocation(true).build() : null;
            this.crossEntropyKernel = Kernels.find(CrossEntropyKernel.class, ctx.parameters().getDevice()).orElse(null);
            if (c.mtp() != null && !preProcess) {
                throw new IllegalArgumentException("--mtp-num-layers " + c.mtp().numLayers() + " needs the embedding on"
                        + " the chunk with the output layer (one pipeline stage, no virtual stages)");
            }
            this.mtp = c.mtp() == null ? null : registerModule("", new MultiTokenPrediction(ctx, spec));
        } else {
            this.mtp = null;
            this.finalNorm = null;
            this.output = null;
            this.tiedOutput = null;
            this.outputIsEmbeddingCopy = false;
            this.crossEntropyKernel = null;
        }
        List<List<Parameter>> perLayer = new ArrayList<>();
        for (TransformerLayer layer : layers.asList()) {
            perLayer.add(List.copyOf(layer.parameters()));
        }
        this.layerParameters = List.copyOf(perLayer);
        this.embeddingParameters = embedding == null ? List.of() : List.copyOf(embedding.parameters());
        List<Parameter> head = new ArrayList<>();
        if (finalNorm != null) {
            head.addAll(finalNorm.parameters());
            head.addAll(output != null ? output.parameters() : List.of(embedding.wordWeight()));
            if (mtp != null) {
                head.addAll(mtp.parameters());
            }
        }
        this.headReads = List.copyOf(head);
        List<Parameter> own = new ArrayList<>();
        if (finalNorm != null) {
            own.addAll(finalNorm.parameters());
            if (output != null) {
                own.addAll(output.parameters());
            }
            if (mtp != null) {
                own.addAll(mtp.parameters());
            }
        }
        this.headParameters = List.copyOf(own);
        Map<RecomputeSegment, List<Parameter>> runs = new HashMap<>();
        for (RecomputeSegment segment : segments) {
            if (segment.recomputed()) {
                List<Parameter> reads = new ArrayList<>();
                layerParameters.subList(segment.start(), segment.end()).forEach(reads::addAll);
                runs.put(segment, List.copyOf(reads));
            }
        }
        this.recomputedReads = Map.copyOf(runs);
    }

    /**
     * Builds one chunk.
     *
     * @param ctx the model context
     * @param spec which implementations to use
     * @param layerNumbers global indices of this chunk's layers
     * @param preProcess whether this chunk starts the model (embedding)
     * @param postProcess whether this chunk ends the model (final norm, output layer, loss)
     * @return the chunk; it owns its parameters (in {@code ctx.parameters()})
     * @throws IllegalArgumentException if the config does not fit the context's layout
     *     ({@link TransformerConfig#validate(io.mcore4j.parallel.ParallelDims)}) or a layer number is
     *     outside the model
     */
    public static GptModel build(ModelContext ctx, LayerSpec spec, int[] layerNumbers, boolean preProcess, boolean postProcess) {
        ctx.config().validate(ctx.groups().dims());
        for (int n : layerNumbers) {
            if (n < 0 || n >= ctx.config().numLayers()) {
                throw new IllegalArgumentException("layer number " + n + " is outside the model's "
                        + ctx.config().numLayers() + " layers");
            }
        }
        return new GptModel(ctx, spec, layerNumbers, preProcess, postProcess);
    }

    /** @return this chunk's transformer layers, in order (read-only) */
    public List<TransformerLayer> layers() {
        return layers.asList();
    }

    /** @return whether this chunk holds the embedding */
    public boolean isPreProcess() {
        return embedding != null;
    }

    /** @return whether this chunk holds the output layer and loss */
    public boolean isPostProcess() {
        return finalNorm != null;
    }

    /**
     * Runs the chunk; the loss (on the last chunk) is the mean over every token.
     *
     * @param scope the micro-batch's scope
     * @param tokens token ids [s, b] (used by the first chunk)
     * @param input hidden states from the previous stage (chunks after the first), or null
     * @param labels target ids [s, b] (used by the last chunk), or null to return logits
     * @return see {@link #forward(AutogradScope, NDArray, NDArray, NDArray, NDArray)}
     */
    public NDArray forward(AutogradScope scope, NDArray tokens, NDArray input, NDArray labels) {
        return forward(scope, tokens, input, labels, null);
    }

    /**
     * Runs the chunk.
     *
     * <p>Under context parallelism every per-token tensor is this rank's part of the sequence
     * ({@link io.mcore4j.contextparallel.ContextParallelSplit#split}), so {@code s} is
     * {@code S / CP}. The loss returned by a rank is {@code CP · Σ(loss·mask) / Σ mask}, the mask
     * summed over the whole sequence (one all-reduce over {@code cp}; without a mask every token
     * counts and nothing is communicated): averaging it over the {@code dp-cp} group, as the
     * gradient reduction does, gives the loss of the whole sequence exactly as without context
     * parallelism (Megatron's loss function scales by the CP size the same way).
     *
     * @param scope the micro-batch's scope
     * @param tokens token ids [s, b] (used by the first chunk)
     * @param input hidden states from the previous stage (chunks after the first), or null
     * @param labels target ids [s, b] (used by the last chunk), or null to return logits
     * @param lossMask weights [s, b] of the tokens' losses (1 counts, 0 ignores), or null for all ones
     * @return the loss above (a float32 scalar) on the last chunk when labels are given;
     *         logits [s, b, V/TP] on the last chunk without labels; hidden states elsewhere
     * @throws IllegalArgumentException if the mask's shape differs from the labels'
     */
    public NDArray forward(AutogradScope scope, NDArray tokens, NDArray input, NDArray labels, NDArray lossMask) {
        return run(scope, tokens, input, labels, lossMask, null, TokenPositions.DEFAULT);
    }

    /**
     * Runs the chunk on tokens at explicit positions, in packed sequences (Megatron's {@code position_ids}
     * and {@code packed_seq_params}): rotary or learned position embeddings read the position ids, and
     * no token attends a token of another sequence. Every chunk of the model needs the same
     * {@code positions} (the attention of each layer reads them).
     *
     * @param scope the micro-batch's scope
     * @param tokens token ids [s, b] (used by the first chunk)
     * @param input hidden states from the previous stage (chunks after the first), or null
     * @param labels target ids [s, b] (used by the last chunk), or null to return logits
     * @param lossMask weights [s, b] of the tokens' losses, or null for all ones
     * @param positions the tokens' position ids (this rank's, [s, b]) and the micro-batch's packed sequences;
     *     without position ids, packed sequences split per sequence over context parallelism take the
     *     tokens' indices in their column
     * @return see {@link #forward(AutogradScope, NDArray, NDArray, NDArray, NDArray)}
     * @throws IllegalArgumentException if the mask's or the position ids' shape differs from the tokens'
     */
    public NDArray forward(AutogradScope scope, NDArray tokens, NDArray input, NDArray labels, NDArray lossMask,
                           TokenPositions positions) {
        return run(scope, tokens, input, labels, lossMask, null, Objects.requireNonNull(positions, "positions"));
    }

    /**
     * Runs the chunk for generation (a distinct name, so that {@code forward(scope, tokens, input, null)}
     * stays unambiguous): the tokens continue sequences whose earlier keys and values sit in
     * {@code inference}'s caches, at positions from its offset on; each layer appends to its cache.
     *
     * @param scope a no-grad scope ({@link AutogradScope#openNoGrad})
     * @param tokens token ids [s, b] (used by the first chunk)
     * @param input hidden states [s, b, h] from the previous stage (chunks after the first), or null
     * @param inference the generation's caches and offset
     * @return logits [s, b, V/TP] on the last chunk; hidden states [s, b, h] elsewhere
     * @throws IllegalArgumentException if the scope records autograd, or the model uses sequence or
     *     context parallelism
     */
    public NDArray inferenceForward(AutogradScope scope, NDArray tokens, NDArray input, InferenceContext inference) {
        Objects.requireNonNull(inference, "inference");
        if (scope.isGradEnabled()) {
            throw new IllegalArgumentException("generation with a key/value cache runs in a no-grad scope"
                    + " (AutogradScope.openNoGrad), got a scope that records autograd");
        }
        if (ctx.config().sequenceParallel() || ctx.groups().cp().size() > 1) {
            throw new IllegalArgumentException("generation needs a model built without sequence or context parallelism"
                    + " (its checkpoint loads into one): one new token per step cannot be split over the sequence");
        }
        return run(scope, tokens, input, null, null, inference, TokenPositions.DEFAULT);
    }

    /** @return the context this chunk was built with (config, groups, parameter manager) */
    public ModelContext context() {
        return ctx;
    }

    private NDArray run(AutogradScope scope, NDArray tokens, NDArray input, NDArray labels, NDArray lossMask,
                        InferenceContext inference, TokenPositions given) {
        TokenPositions positions = withPositionIds(scope, given);
        NDArray hidden;
        if (embedding != null) {
            beforeForward(embeddingParameters);
            hidden = inference == null ? embedding.forward(scope, tokens, positions.positionIds())
                    : embedding.forward(scope, tokens, inference.sequenceLengthOffset());
        } else if (input != null) {
            hidden = input;
        } else {
            throw new IllegalArgumentException("a chunk without the embedding needs the previous stage's hidden states");
        }
        boolean grad = scope.isGradEnabled();
        List<TransformerLayer> chunk = layers.asList();
        boolean lastRecomputed = false;
        for (RecomputeSegment segment : inference == null ? segments : plainSegments) {
            List<TransformerLayer> run = chunk.subList(segment.start(), segment.end());
            // where parameters are released under kept graphs, the cut before this segment names the plain layer
            // before it, whose backward comes next, to be gathered again
            List<Parameter> before = releasesKeptGraphs() && segment.start() > 0 && !lastRecomputed
                    ? layerParameters.get(segment.start() - 1) : List.of();
            if (segment.recomputed()) {
                List<Parameter> reads = recomputedReads.get(segment);
                for (int i = segment.start(); i < segment.end(); i++) {
                    beforeForward(layerParameters.get(i));
                }
                // full recompute: the run keeps only its input (its Recompute is the graph's cut); parameters
                // held only while read are released after it, and after its backward (the boundary before it)
                boolean releaseAfterBackward = grad && hidden != input && !residencies.isEmpty();
                hidden = stage(scope, hidden, input, h -> TransformerLayer.forwardRecomputed(scope, run,
                        releaseAfterBackward ? scope.apply1(boundary(reads, before), h) : h, positions,
                        residencies.isEmpty() ? null : allResidencies, reads));
            } else {
                TransformerLayer layer = run.get(0);
                List<Parameter> parameters = layerParameters.get(segment.start());
                beforeForward(parameters);
                // a cut per layer keeps each backward segment to one layer instead of the whole residual
                // chain; when backward reaches it, the layer after it is done
                boolean cutHere = grad && hidden != input;
                hidden = stage(scope, hidden, input, h -> {
                    NDArray in = cutHere ? scope.apply1(boundary(parameters, before), h) : h;
                    return inference != null ? layer.forward(scope, in, inference) : layer.forward(scope, in, positions);
                });
                // its graph stays valid: backward gathers them again (not the last layer's, whose backward follows)
                if (releasesKeptGraphs() && !(grad && segment.end() == chunk.size())) {
                    allResidencies.afterUse(parameters);
                }
            }
            lastRecomputed = segment.recomputed();
        }
        boolean cut = grad && !lastRecomputed;
        if (finalNorm == null) {
            return hidden;
        }
        // the same cut before the final norm and the output layer, for listeners (after a recomputed layer
        // too where parameters are released, so that a bucket shared with the last layer's is reported whole)
        // and, where parameters are released under kept graphs, to gather the last layer's before its backward
        List<Parameter> lastLayer = releasesKeptGraphs() && !lastRecomputed && !chunk.isEmpty()
                ? layerParameters.get(chunk.size() - 1) : List.of();
        boolean cutHead = ((cut || grad && !residencies.isEmpty()) && !gradientListeners.isEmpty()
                || grad && !lastLayer.isEmpty()) && hidden != input;
        beforeForward(headReads);
        return stage(scope, hidden, input,
                h -> head(scope, cutHead ? scope.apply1(boundary(headParameters, lastLayer), h) : h, tokens, labels,
                        lossMask, positions));
    }

    /**
     * The positions as given, or for packed sequences split per sequence over context parallelism without
     * position ids, with the ids of this rank's tokens in their column (the whole-column split's default
     * positions do not apply to them).
     */
    private TokenPositions withPositionIds(AutogradScope scope, TokenPositions positions) {
        ContextParallelSplit split = ContextParallelSplit.of(ctx.groups().cp());
        PackedSequences packed = positions.sequences();
        if (positions.positionIds() != null || !split.splitsPerSequence(packed)) {
            return positions;
        }
        int b = packed.columns();
        long s = packed.sequenceLength();
        int local = Math.toIntExact(split.localLength(s));
        long[] ids = new long[local * b];
        for (int c = 0; c < b; c++) {
            long[] mine = split.tokenIndicesOf(split.rank(), packed, c, s);
            for (int t = 0; t < local; t++) {
                ids[t * b + c] = mine[t];
            }
        }
        return new TokenPositions(scope.manager().create(ids, new Shape(local, b)), packed);
    }

    /**
     * Runs one stage of the residual stream (a layer, or the head) in a frame of the scope, then
     * hands the stream over: the stage's input dies unless it is the caller's (a pipeline schedule
     * reads its gradient after backward). What the stage created dies with its frame.
     */
    private static NDArray stage(AutogradScope scope, NDArray stream, NDArray callerInput, UnaryOperator<NDArray> body) {
        NDArray next = scope.frame(() -> body.apply(stream));
        if (stream != callerInput) {
            scope.release(stream);
        }
        return next;
    }

    /**
     * Final norm, output layer and, with labels, the (masked) mean loss. Without grad nothing refers to the
     * logits after the loss and they die with the frame; with grad the cross-entropy's Function
     * refers to them until backward.
     */
    private NDArray head(AutogradScope scope, NDArray hidden, NDArray tokens, NDArray labels, NDArray lossMask,
                         TokenPositions positions) {
        NDArray normed = finalNorm.forward(scope, hidden);
        if (mtp != null && labels != null && scope.isGradEnabled()) {
            // the depths' loss reaches the gradients through the hidden states, scaled like the main loss
            // (Megatron's MTPLossAutoScaler); the returned loss stays the main model's
            NDArray mtpLoss = mtp.loss(scope, normed, tokens, labels, lossMask, positions,
                    (ids, positionIds) -> embedding.forward(scope, ids, positionIds), h -> logits(scope, h),
                    (logits, targets) -> lossPerToken(scope, logits, targets));
            normed = AuxLossAutoScaler.attach(scope, ctx.auxLossScale(), normed, mtpLoss);
        }
        NDArray logits = logits(scope, normed);
        if (labels == null) {
            return logits;
        }
        NDArray losses = lossPerToken(scope, logits, labels);
        return lossMask == null ? Cast.apply(scope, losses, DataType.FLOAT32).mean() : maskedLoss(scope, losses, lossMask);
    }

    private NDArray logits(AutogradScope scope, NDArray normed) {
        return output == null
                ? tiedOutput.forward(scope, normed, embedding.wordWeight()).output()
                : output.forward(scope, normed).output();
    }

    private NDArray lossPerToken(AutogradScope scope, NDArray logits, NDArray labels) {
        return VocabParallelCrossEntropy.lossPerToken(scope, ctx.groups().tp(), logits, labels, 0.0, crossEntropyKernel);
    }

    /** @return multi-token prediction's depths (on the last chunk, with {@link TransformerConfig#mtp()}), or null */
    public MultiTokenPrediction mtp() {
        return mtp;
    }

    /**
     * {@code CP · Σ(loss·mask) / max(1, Σ mask)} with the mask summed over the context-parallel
     * group; a micro-batch whose mask is all zeros contributes a zero loss.
     */
    private NDArray maskedLoss(AutogradScope scope, NDArray losses, NDArray lossMask) {
        if (!lossMask.getShape().equals(losses.getShape())) {
            throw new IllegalArgumentException("loss mask of shape " + lossMask.getShape()
                    + " does not match the labels' shape " + losses.getShape());
        }
        // everything here lands in the head's frame (the caller's mask stays the caller's)
        NDManager m = scope.manager();
        NDArray mask = lossMask.getDataType() == DataType.FLOAT32 ? lossMask
                : Tensors.own(lossMask.toType(DataType.FLOAT32, false), m);
        NDArray count = Tensors.own(mask.sum(), m);
        Communicator cp = ctx.groups().cp();
        if (cp.size() > 1) {
            count = cp.allReduce(count, ReduceOp.SUM, m);
        }
        NDArray divisor = count.maximum(Tensors.scalar(1.0, count, m)).div(Tensors.scalar(cp.size(), count, m));
        NDArray weighted = Tensors.own(Cast.apply(scope, losses, DataType.FLOAT32).mul(mask), m);
        return weighted.sum().div(divisor);
    }

    /** @return parameters whose gradients are summed over the embedding group (tied weights split across stages) */
    public List<Parameter> sharedEmbeddingParameters() {
        List<Parameter> out = new ArrayList<>();
        if (!ctx.config().tiedEmbeddings() || ctx.groups().dims().pipelineParallel() == 1) {
            return out;
        }
        if (embedding != null && finalNorm == null) {
            out.add(embedding.wordWeight());
        }
        if (outputIsEmbeddingCopy) {
            out.add(output.weight());
        }
        return out;
    }

    /**
     * Per-step bookkeeping of the mixture-of-experts layers: aux-loss-free bias updates (a
     * collective) and the global aux loss's token counts. Call on every rank after the step's last
     * backward and before the optimizer step.
     */
    public void finishStep() {
        for (TransformerLayer layer : layers) {
            if (layer.moe() != null) {
                layer.moe().updateExpertBias();
                layer.moe().resetGlobalAuxLossTracker();
            }
        }
        if (mtp != null) {
            for (MoeLayer moe : mtp.moeLayers()) {
                moe.updateExpertBias();
                moe.resetGlobalAuxLossTracker();
            }
        }
    }

    /**
     * Adds a listener told during backward, per pass, when the parameters of each layer (and of the
     * final norm and output layer together) have their gradients from that pass complete: when
     * backward leaves the layer. Parameters of a chunk's first layer fed by a previous pipeline
     * stage, of the embedding, of the layers full recompute checkpoints, and of the final norm and
     * output layer after a checkpointed layer are not reported (their gradients are complete when
     * the pass's backward returns), except that with a residency ({@link #addParameterResidency}) the
     * checkpointed layers and the head after them are reported too. Data-parallel wrappers use this to
     * start gradient reduction during backward.
     *
     * @param listener the listener; called on the thread running backward
     */
    public void addGradientReadyListener(GradientReadyListener listener) {
        gradientListeners.add(Objects.requireNonNull(listener, "listener"));
    }

    /**
     * Adds a hook told before each forward of this chunk reads parameters: the embedding's before the
     * embedding runs, each layer's before that layer (every layer of a fully recomputed run before
     * the run), and the final norm's and output layer's (the word embedding weight where the output
     * layer reuses it) before the head. Every parameter of the chunk is named before it is first read
     * by that forward; the backward and the recomputation in backward read nothing not named before.
     * The distributed optimizer's overlapped parameter all-gather uses this to wait for a bucket only
     * when its parameters are needed ({@code --overlap-param-gather}).
     *
     * @param hook the hook; called on the thread running forward
     */
    public void addForwardPreHook(ForwardPreHook hook) {
        forwardPreHooks.add(Objects.requireNonNull(hook, "hook"));
    }

    /**
     * Adds a residency told, besides the forward pre-hooks' calls, when layers' parameters may be released and
     * before they are read again (ZeRO-3): after each layer's forward; before the rerun in backward of each
     * recomputed run of layers, and before the backward of a layer that kept its graph; after each backward.
     * The embedding's and the head's parameters are only named before they are read. A layer that keeps its
     * graph (not recomputed) is released only by a residency that {@link ParameterResidency#keepsSavedTensors
     * keeps saved tensors valid}; with any other, every layer must be recomputed
     * ({@code --recompute-granularity full}).
     *
     * @param residency the residency; also added as a forward pre-hook
     * @throws IllegalArgumentException if a layer of this chunk is not fully recomputed and the residency does not
     *     keep saved tensors valid, or a residency added before does not keep them and this one does, or the reverse
     */
    public void addParameterResidency(ParameterResidency residency) {
        Objects.requireNonNull(residency, "residency");
        if (!residencies.isEmpty() && residencies.get(0).keepsSavedTensors() != residency.keepsSavedTensors()) {
            throw new IllegalArgumentException("the residencies of one model must all keep saved tensors valid, or none");
        }
        for (RecomputeSegment segment : segments) {
            if (!segment.recomputed() && !residency.keepsSavedTensors()) {
                throw new IllegalArgumentException("--data-parallel-sharding-strategy optim_grads_params (ZeRO-3) needs"
                        + " --recompute-granularity full --recompute-method uniform on " + ctx.parameters().getDevice()
                        + " (layer " + segment.start() + " of this chunk is not recomputed): a layer's gathered weights are"
                        + " released after its forward, and only mcore4j's native library on a CUDA device"
                        + " (scripts/gpu/build-cuda-graphs.sh) releases a weight that a kept graph saved");
            }
        }
        residencies.add(residency);
        forwardPreHooks.add(residency);
    }

    /** @return whether plain layers release their parameters after forward and gather them again for backward */
    private boolean releasesKeptGraphs() {
        return !residencies.isEmpty() && residencies.get(0).keepsSavedTensors();
    }

    /** Every residency at once: what a recomputed run tells before its rerun reads, and after its forward. */
    private final ParameterResidency allResidencies = new ParameterResidency() {
        @Override
        public void beforeForward(List<Parameter> parameters) {
            for (ParameterResidency r : residencies) {
                r.beforeForward(parameters);
            }
        }

        @Override
        public void afterUse(List<Parameter> parameters) {
            for (ParameterResidency r : residencies) {
                r.afterUse(parameters);
            }
        }
    };

    private void beforeForward(List<Parameter> parameters) {
        if (parameters.isEmpty()) {
            return;
        }
        for (ForwardPreHook hook : forwardPreHooks) {
            hook.beforeForward(parameters);
        }
    }

    /**
     * @param completed the parameters of what follows the cut, done when backward reaches it
     * @param next the parameters of the plain layer before the cut, whose backward comes next, to gather again
     *     (empty unless parameters are released under kept graphs)
     */
    private Function boundary(List<Parameter> completed, List<Parameter> next) {
        return (gradientListeners.isEmpty() && residencies.isEmpty()) || completed.isEmpty() && next.isEmpty()
                ? LAYER_BOUNDARY : new LayerBoundary(List.copyOf(completed), List.copyOf(next), gradientListeners, residencies);
    }

    /**
     * Identity whose only effect is to cut the graph: backward segments stay one layer long. Its
     * backward runs once the segment after it is done, so it names the parameters the segment before it
     * reads in backward, if any, to the residencies, then reports that segment's parameters.
     */
    private record LayerBoundary(List<Parameter> completed, List<Parameter> next, List<GradientReadyListener> listeners,
                                 List<ParameterResidency> residencies) implements Function {
        @Override
        public NDArray[] forward(FunctionContext ctx, NDArray... inputs) {
            return inputs.clone();
        }

        @Override
        public NDArray[] backward(FunctionContext ctx, NDArray... gradOutputs) {
            // the next segment's weights first: their all-gathers queue ahead of this segment's reductions
            if (!next.isEmpty()) {
                for (ParameterResidency residency : residencies) {
                    residency.beforeForward(next);
                }
            }
            if (!completed.isEmpty()) {
                for (GradientReadyListener listener : listeners) {
                    listener.gradientsReady(completed);
                }
                for (ParameterResidency residency : residencies) {
                    residency.afterUse(completed);
                }
            }
            return gradOutputs.clone();
        }

        @Override
        public String name() {
            return "layer-boundary";
        }
    }
}
