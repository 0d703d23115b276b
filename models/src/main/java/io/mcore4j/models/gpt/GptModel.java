package io.mcore4j.models.gpt;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.autograd.Cast;
import io.mcore4j.core.autograd.Function;
import io.mcore4j.core.autograd.FunctionContext;
import io.mcore4j.core.nn.GradientReadyListener;
import io.mcore4j.core.nn.Module;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.transformer.InferenceContext;
import io.mcore4j.models.transformer.LayerSpec;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.models.transformer.Norm;
import io.mcore4j.models.transformer.TransformerLayer;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ReduceOp;
import io.mcore4j.tensorparallel.ColumnParallelLinear;
import io.mcore4j.tensorparallel.VocabParallelCrossEntropy;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CopyOnWriteArrayList;

/**
 * One pipeline chunk of a GPT: the embedding if it is the first chunk of the model, a run of
 * transformer layers (by global index), and the final norm, output layer and loss if it is the
 * last. Activations are [s, b, h] ([s/TP, b, h] with sequence parallelism); tokens and labels [s, b].
 *
 * <p>With tied embeddings the output layer multiplies by the word embedding weight. When the
 * embedding and the output layer sit on different pipeline stages, the last stage holds a copy
 * initialised identically (same key, same seed); its gradient must be summed with the first
 * stage's over the embedding group ({@link #sharedEmbeddingParameters()}), and in checkpoints it is
 * a non-main replica of the embedding.
 */
public final class GptModel implements Module {
    private static final String OUTPUT_KEY = "output_layer.";
    private static final Function LAYER_BOUNDARY = new LayerBoundary(List.of(), List.of());

    private final ModelContext ctx;
    private final GptEmbedding embedding;
    private final List<TransformerLayer> layers = new ArrayList<>();
    private final Norm finalNorm;
    private final ColumnParallelLinear output;
    private final ColumnParallelLinear tiedOutput;
    private final boolean outputIsEmbeddingCopy;
    private final List<GradientReadyListener> gradientListeners = new CopyOnWriteArrayList<>();

    private GptModel(ModelContext ctx, LayerSpec spec, int[] layerNumbers, boolean preProcess, boolean postProcess) {
        TransformerConfig c = ctx.config();
        this.ctx = ctx;
        this.embedding = preProcess ? new GptEmbedding(ctx) : null;
        for (int n : layerNumbers) {
            layers.add(new TransformerLayer(ctx, spec, n));
        }
        if (postProcess) {
            this.finalNorm = new Norm(ctx, c.hiddenSize());
            boolean reuseEmbedding = c.tiedEmbeddings() && preProcess;
            this.outputIsEmbeddingCopy = c.tiedEmbeddings() && !preProcess;
            String key = c.tiedEmbeddings() ? GptEmbedding.WORD_KEY : OUTPUT_KEY;
            ColumnParallelLinear.Builder head = ColumnParallelLinear.builder(c.hiddenSize(), c.vocabSize(), ctx.groups().tp())
                    .bias(false).gatherOutput(false).sequenceParallel(c.sequenceParallel()).dtype(c.dtype())
                    .manager(ctx.parameters()).name(key);
            // with the embedding on this chunk the output layer has no weight of its own: it is given the embedding's
            this.output = reuseEmbedding ? null : head.initializer(ctx.initializer(key + "weight", c.initStd())).build();
            this.tiedOutput = reuseEmbedding ? head.skipWeightAllocation(true).build() : null;
        } else {
            this.finalNorm = null;
            this.output = null;
            this.tiedOutput = null;
            this.outputIsEmbeddingCopy = false;
        }
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
     */
    public static GptModel build(ModelContext ctx, LayerSpec spec, int[] layerNumbers, boolean preProcess, boolean postProcess) {
        return new GptModel(ctx, spec, layerNumbers, preProcess, postProcess);
    }

    /** @return this chunk's transformer layers, in order (read-only) */
    public List<TransformerLayer> layers() {
        return java.util.Collections.unmodifiableList(layers);
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
        return run(scope, tokens, input, labels, lossMask, null);
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
        return run(scope, tokens, input, null, null, inference);
    }

    /** @return the context this chunk was built with (config, groups, parameter manager) */
    public ModelContext context() {
        return ctx;
    }

    private NDArray run(AutogradScope scope, NDArray tokens, NDArray input, NDArray labels, NDArray lossMask,
                        InferenceContext inference) {
        NDArray hidden;
        if (embedding != null) {
            hidden = inference == null ? embedding.forward(scope, tokens)
                    : embedding.forward(scope, tokens, inference.sequenceLengthOffset());
        } else if (input != null) {
            hidden = input;
        } else {
            throw new IllegalArgumentException("a chunk without the embedding needs the previous stage's hidden states");
        }
        boolean cut = ctx.config().recompute() != TransformerConfig.Recompute.FULL && scope.isGradEnabled();
        for (TransformerLayer layer : layers) {
            if (cut && hidden != input) {
                // a cut per layer keeps each backward segment to one layer instead of the whole residual chain;
                // when backward reaches it, the layer after it is done
                hidden = scope.apply1(boundary(layer.parameters()), hidden);
            }
            NDArray layerInput = hidden;
            hidden = layer.forward(scope, layerInput, inference);
            // the caller's input stays: a pipeline schedule reads its gradient after backward
            scope.release(layerInput == input ? null : layerInput);
        }
        if (finalNorm == null) {
            return hidden;
        }
        if (cut && !gradientListeners.isEmpty() && hidden != input) {
            // the same for the final norm and the output layer, for listeners
            List<Parameter> head = new ArrayList<>(finalNorm.parameters());
            if (output != null) {
                head.addAll(output.parameters());
            }
            hidden = scope.apply1(boundary(head), hidden);
        }
        NDArray normed = finalNorm.forward(scope, hidden);
        NDArray logits = output == null
                ? tiedOutput.forward(scope, normed, embedding.wordWeight()).output()
                : output.forward(scope, normed).output();
        scope.release(hidden == input ? null : hidden, normed);
        if (labels == null) {
            return logits;
        }
        NDArray losses = VocabParallelCrossEntropy.lossPerToken(scope, ctx.groups().tp(), logits, labels, 0.0);
        NDArray loss = lossMask == null ? Cast.apply(scope, losses, DataType.FLOAT32).mean() : maskedLoss(scope, losses, lossMask);
        // without grad nothing refers to the logits any more; with grad the cross-entropy's
        // Function does until backward, and the scope leaves them open
        scope.release(logits);
        return loss;
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
        NDManager m = scope.manager();
        NDArray mask = lossMask.toType(DataType.FLOAT32, false);
        NDArray count = mask.sum();
        Communicator cp = ctx.groups().cp();
        if (cp.size() > 1) {
            count = cp.allReduce(count, ReduceOp.SUM, m);
        }
        NDArray divisor = count.maximum(Tensors.scalar(1.0, count, m)).div(Tensors.scalar(cp.size(), count, m));
        NDArray weighted = Cast.apply(scope, losses, DataType.FLOAT32).mul(mask);
        NDArray loss = weighted.sum().div(divisor);
        scope.release(weighted, divisor, count, mask == lossMask ? null : mask);
        return loss;
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

    @Override
    public List<Parameter> parameters() {
        List<Parameter> out = new ArrayList<>();
        if (embedding != null) {
            out.addAll(embedding.parameters());
        }
        for (TransformerLayer layer : layers) {
            out.addAll(layer.parameters());
        }
        if (finalNorm != null) {
            out.addAll(finalNorm.parameters());
            if (output != null) {
                out.addAll(output.parameters());
            }
        }
        return out;
    }

    /**
     * Parameters by checkpoint key; the last stage's copy of a tied embedding is named after the
     * embedding weight it mirrors.
     */
    @Override
    public Map<String, Parameter> namedParameters(String prefix) {
        Map<String, Parameter> out = new LinkedHashMap<>();
        if (embedding != null) {
            out.putAll(embedding.namedParameters(prefix));
        }
        for (TransformerLayer layer : layers) {
            out.putAll(layer.namedParameters(prefix));
        }
        if (finalNorm != null) {
            out.putAll(finalNorm.namedParameters(prefix + "decoder.final_layernorm."));
            if (output != null) {
                out.putAll(output.namedParameters(prefix + (outputIsEmbeddingCopy ? GptEmbedding.WORD_KEY : OUTPUT_KEY)));
            }
        }
        return out;
    }

    /**
     * This chunk's checkpoint pieces, keyed independently of the layout (no TP, CP, PP or DP rank in
     * a key). Layers are keyed by global index; copies held by several data- or context-parallel
     * ranks are main replicas only on rank 0 of the {@code dp-cp} group; the last stage's copy of a tied
     * embedding is never a main replica.
     */
    @Override
    public List<ShardedTensor> shardedState(String prefix) {
        List<ShardedTensor> out = new ArrayList<>();
        if (embedding != null) {
            out.addAll(embedding.shardedState(prefix));
        }
        if (finalNorm != null) {
            out.addAll(finalNorm.shardedState(prefix + "decoder.final_layernorm."));
            if (output != null) {
                String key = outputIsEmbeddingCopy ? GptEmbedding.WORD_KEY : OUTPUT_KEY;
                for (ShardedTensor t : output.shardedState(prefix + key)) {
                    out.add(t.replicatedIf(outputIsEmbeddingCopy));
                }
            }
        }
        boolean dpReplica = ctx.groups().dpCp().rank() > 0;
        List<ShardedTensor> result = new ArrayList<>(out.size());
        for (ShardedTensor t : out) {
            result.add(t.replicatedIf(dpReplica));
        }
        for (TransformerLayer layer : layers) {
            result.addAll(layer.shardedState(prefix)); // marks its own data-parallel replicas
        }
        return result;
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
    }

    /**
     * Adds a listener told during backward, per pass, when the parameters of each layer (and of the
     * final norm and output layer together) have their gradients from that pass complete: when
     * backward leaves the layer. Parameters of a chunk's first layer fed by a previous pipeline
     * stage, of the embedding, and every parameter under full recompute are not reported (their
     * gradients are complete when the pass's backward returns). Data-parallel wrappers use this to
     * start gradient reduction during backward.
     *
     * @param listener the listener; called on the thread running backward
     */
    public void addGradientReadyListener(GradientReadyListener listener) {
        gradientListeners.add(Objects.requireNonNull(listener, "listener"));
    }

    private Function boundary(List<Parameter> completed) {
        return gradientListeners.isEmpty() || completed.isEmpty() ? LAYER_BOUNDARY
                : new LayerBoundary(List.copyOf(completed), gradientListeners);
    }

    /**
     * Identity whose only effect is to cut the graph: backward segments stay one layer long. Its
     * backward runs once the segment after it is done, so it reports that segment's parameters.
     */
    private record LayerBoundary(List<Parameter> completed, List<GradientReadyListener> listeners) implements Function {
        @Override
        public NDArray[] forward(FunctionContext ctx, NDArray... inputs) {
            return inputs.clone();
        }

        @Override
        public NDArray[] backward(FunctionContext ctx, NDArray... gradOutputs) {
            for (GradientReadyListener listener : listeners) {
                listener.gradientsReady(completed);
            }
            return gradOutputs.clone();
        }

        @Override
        public String name() {
            return "layer-boundary";
        }
    }
}
