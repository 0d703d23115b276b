package io.mcore4j.models.transformer;

import ai.djl.Device;
import ai.djl.ndarray.NDArray;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.autograd.Function;
import io.mcore4j.core.autograd.FunctionContext;
import io.mcore4j.core.autograd.Recompute;
import io.mcore4j.core.fp8.Fp8Scaling;
import io.mcore4j.core.kernel.BiasGradientKernel;
import io.mcore4j.core.kernel.Kernels;
import io.mcore4j.core.kernel.LayerNormKernel;
import io.mcore4j.core.nn.AbstractModule;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.nn.ParameterResidency;
import io.mcore4j.core.nn.UnaryModule;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.moe.MoeLayer;
import io.mcore4j.tensorparallel.LoraLinear;
import io.mcore4j.tensorparallel.MlpActivation;
import io.mcore4j.tensorparallel.ParallelMlp;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * A pre-norm transformer layer: {@code h = x + dropout(attention(norm(x)))} (the grouped-query {@link SelfAttention},
 * or {@link MultiLatentAttention} where {@link TransformerConfig#multiLatentAttention()} is set),
 * {@code out = h + dropout(mlp(norm(h)))}; with {@link TransformerConfig#postSelfAttnLayernorm()} and
 * {@link TransformerConfig#postMlpLayernorm()} (Gemma's "sandwich" norms) the attention's and the MLP's outputs
 * are normed too before their residual adds. Full recompute checkpoints runs of layers
 * ({@link #forwardRecomputed}, which the model calls as {@link RecomputeSegment} says); selective
 * recompute of {@code core_attn}, {@code mlp} or {@code moe} checkpoints that part of every layer.
 * Recomputed parts replay their dropout masks.
 *
 * <p>Keys, relative to the layer's {@link #keyPrefix}: {@code input_layernorm.*},
 * {@code self_attention.*}, {@code post_self_attn_layernorm.*}, {@code pre_mlp_layernorm.*}, {@code mlp.*},
 * {@code post_mlp_layernorm.*}. Dense parts held
 * identically by every data- and context-parallel rank are main replicas only on rank 0 of the
 * {@code dp-cp} group; a mixture of experts
 * describes its own replicas (different DP ranks hold different experts).
 */
public final class TransformerLayer extends AbstractModule implements UnaryModule {
    private final ModelContext ctx;
    private final int layerNumber;
    private final Norm inputNorm;
    private final Attention attention;
    private final Norm preMlpNorm;
    /** The norms of the attention's and the MLP's outputs, or null. */
    private final Norm postAttentionNorm;
    private final Norm postMlpNorm;
    private final ParallelMlp mlp;
    private final MoeLayer moe;
    /** The second half as one Function with a written-out backward where it applies ({@link #mlpHalf}), else null. */
    private final MlpHalf mlpHalf;
    /**
     * Whether the second half's branch records {@link Function}s (the mixture of experts' exchanges and loss scaler,
     * FP8 GEMMs, a recomputed MLP): its input {@code h} is then cut ({@link #RESIDUAL_FORK}).
     */
    private final boolean branchRecordsFunctions;

    /**
     * @param ctx the model context
     * @param spec which implementations to use
     * @param layerNumber the global layer index (keys and seeds depend on it, not on the layout)
     */
    public TransformerLayer(ModelContext ctx, LayerSpec spec, int layerNumber) {
        this(ctx, spec, layerNumber, keyPrefix(layerNumber));
    }

    /**
     * A layer built like decoder layer {@code layerNumber} (its attention, MoE or dense MLP, FP8) under other
     * keys: a multi-token prediction depth's layer, which Megatron builds from the decoder's last layer spec.
     *
     * @param ctx the model context
     * @param spec which implementations to use
     * @param layerNumber the global index of the decoder layer whose kind this layer takes
     * @param key checkpoint key prefix of the layer's weights (their initialisation seeds follow it), e.g.
     *     {@code "mtp.layers.0.transformer_layer."}
     */
    public TransformerLayer(ModelContext ctx, LayerSpec spec, int layerNumber, String key) {
        TransformerConfig c = ctx.config();
        this.ctx = ctx;
        this.layerNumber = layerNumber;
        // dense parts held identically by every data- and context-parallel rank are main replicas
        // only on rank 0 of the dp-cp group
        boolean dpReplica = ctx.groups().dpCp().rank() > 0;
        this.inputNorm = registerModule("input_layernorm.", new Norm(ctx, c.hiddenSize()), dpReplica);
        this.attention = registerModule("self_attention.", c.multiLatentAttention() != null
                ? new MultiLatentAttention(ctx, spec, key + "self_attention.", layerNumber)
                : new SelfAttention(ctx, spec, key + "self_attention.", layerNumber), dpReplica);
        this.postAttentionNorm = c.postSelfAttnLayernorm()
                ? registerModule("post_self_attn_layernorm.", new Norm(ctx, c.hiddenSize()), dpReplica) : null;
        this.preMlpNorm = registerModule("pre_mlp_layernorm.", new Norm(ctx, c.hiddenSize()), dpReplica);
        if (c.isMoeLayer(layerNumber)) {
            this.mlp = null;
            this.moe = registerModule("mlp.", MoeLayer.build(c.moe().config(), c.hiddenSize(), ctx.groups(),
                    ctx.parameters(), ctx.seeds(), key + "mlp.", ctx.auxLossScale()));
        } else {
            this.mlp = registerModule("mlp.", denseMlp(ctx, spec, key + "mlp.", spec.fp8For(c, layerNumber)), dpReplica);
            this.moe = null;
        }
        this.postMlpNorm = c.postMlpLayernorm() ? registerModule("post_mlp_layernorm.", new Norm(ctx, c.hiddenSize()), dpReplica)
                : null;
        this.mlpHalf = moe == null ? mlpHalf(ctx, preMlpNorm, mlp) : null;
        this.branchRecordsFunctions = moe != null || mlp.fc1().fp8() != null || mlp.fc2().fp8() != null
                || c.recomputes(TransformerConfig.RecomputeModule.MLP);
    }

    /**
     * The one-Function MLP half at more than one tensor-parallel rank too (see {@link #mlpHalf}); on by default,
     * {@code -Dmcore4j.models.fusedMlpHalfTensorParallel=false} composes the half from its modules there.
     */
    static final boolean FUSED_HALF_TENSOR_PARALLEL =
            Boolean.parseBoolean(System.getProperty("mcore4j.models.fusedMlpHalfTensorParallel", "true"));

    /**
     * Identity that cuts the graph at the second half's input {@code h} where that half's branch records Functions.
     * Backward runs libtorch's graph from every pending gradient at once up to the cuts; without this cut, the run
     * that starts at the layer's output reaches {@code h} through the residual add before the branch's Functions have
     * given {@code h} their part, and goes on through the attention half, which the branch's part then traverses a
     * second time (twice the attention's backward kernels). With the cut both parts add up in {@code h}'s leaf first.
     */
    private static final Function RESIDUAL_FORK = new Function() {
        @Override
        public NDArray[] forward(FunctionContext ctx, NDArray... inputs) {
            return inputs.clone();
        }

        @Override
        public NDArray[] backward(FunctionContext ctx, NDArray... gradOutputs) {
            return gradOutputs.clone();
        }

        @Override
        public String name() {
            return "residual-fork";
        }
    };

    /**
     * The second half {@code h + fc2(gelu(fc1(LN(h))))} as one {@link MlpHalf} where the device has a
     * {@link BiasGradientKernel} (its bias gradients are then one pass each) and the half is that
     * function exactly: LayerNorm, exact GELU, biases, no dropout, no sequence parallelism, a dense MLP,
     * no selective recompute of the MLP, at any tensor-parallel size (unless
     * {@code -Dmcore4j.models.fusedMlpHalfTensorParallel=false}; on 4×H200 under a CUDA graph it measured 2% faster
     * than the composed half at TP2 and TP4, with 1.5 GiB less memory). Elsewhere the half is composed from its
     * modules. FP8 linears stay FP8 in the half at one rank (it multiplies through their GEMMs); at more ranks FP8
     * halves are composed.
     */
    private static MlpHalf mlpHalf(ModelContext ctx, Norm norm, ParallelMlp mlp) {
        TransformerConfig c = ctx.config();
        int tp = ctx.groups().tp().size();
        boolean applies = c.normalization() == TransformerConfig.Normalization.LAYER_NORM
                && !c.layernormZeroCenteredGamma() && !c.postMlpLayernorm()
                && c.activation() == MlpActivation.GELU && c.addBiasLinear() && c.hiddenDropout() == 0
                && (tp == 1 || (FUSED_HALF_TENSOR_PARALLEL && mlp.fc1().fp8() == null)) && !c.sequenceParallel()
                && !c.recomputes(TransformerConfig.RecomputeModule.MLP);
        if (!applies || mlp.namedParameters("").keySet().stream().anyMatch(LoraLinear::isAdapterKey)) {
            return null; // the one-Function half computes with the plain weights only
        }
        BiasGradientKernel kernel = Kernels.find(BiasGradientKernel.class, ctx.parameters().getDevice()).orElse(null);
        if (kernel == null) {
            return null;
        }
        NDArray epsilon = ctx.parameters().newSubManager(Device.cpu()).create(c.normEpsilon());
        Map<String, Parameter> n = norm.namedParameters("");
        Map<String, Parameter> d = mlp.namedParameters("");
        LayerNormKernel normKernel = Kernels.find(LayerNormKernel.class, ctx.parameters().getDevice()).orElse(null);
        return new MlpHalf(epsilon, kernel, normKernel, mlp.fc1().fp8(), mlp.fc2().fp8(), ctx.groups().tp(),
                n.get("weight"), n.get("bias"),
                d.get("linear_fc1.weight"), d.get("linear_fc1.bias"), d.get("linear_fc2.weight"), d.get("linear_fc2.bias"));
    }

    /** The dense MLP: the spec's fc1 (fused [gate; up] for SwiGLU) and fc2 around the activation. */
    private static ParallelMlp denseMlp(ModelContext ctx, LayerSpec spec, String key, Fp8Scaling fp8) {
        TransformerConfig c = ctx.config();
        MlpActivation activation = c.activation();
        int factor = activation.fc1Factor();
        return new ParallelMlp(
                spec.linearFc1().create(ctx, key + "linear_fc1.", new LayerSpec.LinearSettings(
                        c.hiddenSize(), factor * c.ffnHiddenSize(), c.addBiasLinear(), false, c.initStd(), factor, fp8)),
                spec.linearFc2().create(ctx, key + "linear_fc2.", new LayerSpec.LinearSettings(
                        c.ffnHiddenSize(), c.hiddenSize(), c.addBiasLinear(), false, ctx.outputInitStd(), 1, fp8)),
                activation, true);
    }

    /**
     * @param layerNumber a global layer index
     * @return its checkpoint key prefix, {@code "decoder.layers.<n>."}
     */
    public static String keyPrefix(int layerNumber) {
        return "decoder.layers." + layerNumber + ".";
    }

    /** @return the mixture of experts of this layer, or null for a dense MLP */
    public MoeLayer moe() {
        return moe;
    }

    /** @return the global layer index */
    public int layerNumber() {
        return layerNumber;
    }

    /**
     * @param scope the pass's scope
     * @param x hidden states [s, b, h] (or [s/TP, b, h] with sequence parallelism)
     * @return the layer's output, same shape
     */
    @Override
    public NDArray forward(AutogradScope scope, NDArray x) {
        return forward(scope, x, TokenPositions.DEFAULT);
    }

    /**
     * Runs the layer, during generation with its key/value cache.
     *
     * @param scope the pass's scope
     * @param x hidden states [s, b, h] (or [s/TP, b, h] with sequence parallelism)
     * @param inference the generation's context, or null for the training path
     * @return the layer's output, same shape
     */
    public NDArray forward(AutogradScope scope, NDArray x, InferenceContext inference) {
        if (inference != null) {
            NDArray fused = inference.forwardLayer(scope, this, x);
            return fused != null ? fused : compute(scope, x, inference, TokenPositions.DEFAULT);
        }
        return compute(scope, x, null, TokenPositions.DEFAULT);
    }

    /**
     * Runs the layer in a training pass whose tokens may sit at explicit positions and in packed sequences.
     *
     * @param scope the pass's scope
     * @param x hidden states [s, b, h] (or [s/TP, b, h] with sequence parallelism)
     * @param positions the tokens' position ids and packed sequences ({@link TokenPositions#DEFAULT} for none)
     * @return the layer's output, same shape
     */
    public NDArray forward(AutogradScope scope, NDArray x, TokenPositions positions) {
        return compute(scope, x, null, positions);
    }

    /**
     * Runs consecutive layers as one checkpointed unit (full recompute): forward keeps only
     * {@code x}, backward reruns all of them with their dropout masks replayed. In a scope without
     * grad the layers simply run. The layers must follow each other in the model (each one's output is
     * the next one's input).
     *
     * @param scope the pass's scope
     * @param layers the layers, in order, at least one
     * @param x the first layer's input
     * @return the last layer's output
     */
    public static NDArray forwardRecomputed(AutogradScope scope, List<TransformerLayer> layers, NDArray x) {
        return forwardRecomputed(scope, layers, x, TokenPositions.DEFAULT);
    }

    /**
     * Runs consecutive layers as one checkpointed unit (see {@link #forwardRecomputed(AutogradScope, List,
     * NDArray)}) in a pass whose tokens may sit at explicit positions and in packed sequences.
     *
     * @param scope the pass's scope
     * @param layers the layers, in order, at least one
     * @param x the first layer's input
     * @param positions the tokens' position ids and packed sequences, which the recomputation reuses
     * @return the last layer's output
     */
    public static NDArray forwardRecomputed(AutogradScope scope, List<TransformerLayer> layers, NDArray x,
                                            TokenPositions positions) {
        return forwardRecomputed(scope, layers, x, positions, null, List.of());
    }

    /**
     * Runs consecutive layers as one checkpointed unit whose parameters are held only while read (ZeRO-3):
     * {@code residency} is told before each run (the first, and the rerun in backward) reads the layers'
     * parameters, and after a run that keeps no graph (the first; every run without grad) that it is done
     * with them. Releasing them after the rerun's backward is the caller's (it knows when that backward ends).
     *
     * @param scope the pass's scope
     * @param layers the layers, in order, at least one
     * @param x the first layer's input
     * @param positions the tokens' position ids and packed sequences, which the recomputation reuses
     * @param residency told about the layers' parameters, or null
     * @param reads the layers' parameters, what {@code residency} is told: a list the caller holds across passes
     *     (unused without a residency)
     * @return the last layer's output
     */
    public static NDArray forwardRecomputed(AutogradScope scope, List<TransformerLayer> layers, NDArray x,
                                            TokenPositions positions, ParameterResidency residency,
                                            List<Parameter> reads) {
        if (layers.isEmpty()) {
            throw new IllegalArgumentException("a recomputed run needs at least one layer");
        }
        Recompute.Body body = residency == null || reads.isEmpty()
                ? (inner, in) -> new NDArray[] {runAll(inner, layers, in[0], positions)}
                : (inner, in) -> {
                    residency.beforeForward(reads);
                    NDArray out = runAll(inner, layers, in[0], positions);
                    if (!inner.isGradEnabled()) {
                        residency.afterUse(reads);
                    }
                    return new NDArray[] {out};
                };
        if (!scope.isGradEnabled()) {
            return body.run(scope, x)[0];
        }
        // recompute saves activations for backward, so it follows grad mode; the dropout inside
        // follows training, which the recomputed runs inherit from this scope
        TransformerLayer first = layers.get(0);
        TransformerLayer last = layers.get(layers.size() - 1);
        String name = layers.size() == 1 ? "recompute(layer " + first.layerNumber + ")"
                : "recompute(layers " + first.layerNumber + "-" + last.layerNumber + ")";
        return scope.apply1(new Recompute(name, body, replay(first.ctx, layers)), x);
    }

    /** Runs the layers one after the other, each in a frame; a layer's input dies once the next has it. */
    private static NDArray runAll(AutogradScope scope, List<TransformerLayer> layers, NDArray x, TokenPositions positions) {
        NDArray hidden = x;
        for (TransformerLayer layer : layers) {
            NDArray in = hidden;
            hidden = scope.frame(() -> layer.compute(scope, in, null, positions));
            if (in != x) {
                scope.release(in);
            }
        }
        return hidden;
    }

    /** The random state a run of layers consumes: the dropout generators and each mixture of experts' own. */
    private static Recompute.Replay replay(ModelContext ctx, List<TransformerLayer> layers) {
        List<Recompute.Replay> parts = new ArrayList<>();
        parts.add(new DropoutReplay(ctx.hiddenDropout(), ctx.attentionDropout()));
        for (TransformerLayer layer : layers) {
            if (layer.moe != null) {
                parts.add(layer.moe.randomState());
            }
        }
        return parts.size() == 1 ? parts.get(0) : new Recompute.Replay() {
            @Override
            public Object capture() {
                Object[] tokens = new Object[parts.size()];
                for (int i = 0; i < tokens.length; i++) {
                    tokens[i] = parts.get(i).capture();
                }
                return tokens;
            }

            @Override
            public void restore(Object token) {
                Object[] tokens = (Object[]) token;
                for (int i = 0; i < tokens.length; i++) {
                    parts.get(i).restore(tokens[i]);
                }
            }
        };
    }

    /**
     * The first half's residual operand: {@code x}, or an alias (view) of it where the {@link MlpHalf}
     * follows and grad mode is on. Then {@code h}'s gradient is always the MLP half's input gradient, a
     * tensor nothing else refers to, and it reaches {@code x} unchanged through the residual add; through
     * the view's backward libtorch's accumulation into {@code x}'s gradient receives an alias of it that
     * nothing else refers to and keeps it instead of copying it (when the attention holds Functions, that
     * is {@code x}'s first gradient of the pass; the attention's is added to it later).
     */
    private static NDArray residualOperand(AutogradScope scope, NDArray x, boolean mlpHalfFollows) {
        return mlpHalfFollows && scope.isGradEnabled() ? x.reshape(x.getShape()) : x;
    }

    /**
     * The two residual halves, each a frame: a residual add saves nothing for backward, so a
     * branch's output dies with its half (the scope keeps whatever a Function still refers to,
     * libtorch whatever its graph saved), and the middle residual with the layer.
     */
    private NDArray compute(AutogradScope scope, NDArray x, InferenceContext inference, TokenPositions positions) {
        double p = ctx.config().hiddenDropout();
        boolean half = mlpHalf != null && inference == null;
        return scope.frame(() -> {
            // the residual add of the first half would land in the caller's manager: x is lent to the frame
            NDArray h = scope.frame(x, r -> residualOperand(scope, r, half).add(Dropout.apply(scope,
                    postNorm(scope, postAttentionNorm, attend(scope, inputNorm.forward(scope, r), inference, positions)), p,
                    ctx.hiddenDropout())));
            return scope.frame(() -> {
                if (half) {
                    return mlpHalf.apply(scope, h);
                }
                NDArray in = branchRecordsFunctions && inference == null && scope.isGradEnabled()
                        ? scope.apply1(RESIDUAL_FORK, h) : h;
                NDArray mlpIn = preMlpNorm.forward(scope, in);
                return in.add(Dropout.apply(scope, postNorm(scope, postMlpNorm, feedForward(scope, mlpIn, inference)), p,
                        ctx.hiddenDropout()));
            });
        });
    }

    /**
     * The MLP or mixture of experts on the normed {@code h}; under selective recompute of {@code mlp}
     * (dense layers) or {@code moe} (mixture-of-experts layers) in a scope with grad, recomputed in
     * backward: only its input is kept.
     */
    private NDArray feedForward(AutogradScope scope, NDArray mlpIn, InferenceContext inference) {
        TransformerConfig c = ctx.config();
        boolean recomputed = inference == null && scope.isGradEnabled()
                && c.recomputes(moe != null ? TransformerConfig.RecomputeModule.MOE : TransformerConfig.RecomputeModule.MLP);
        if (!recomputed) {
            return moe != null ? moe.forward(scope, mlpIn) : mlp.forward(scope, mlpIn);
        }
        Recompute recompute = moe != null
                ? new Recompute("recompute(moe of layer " + layerNumber + ")",
                        (inner, in) -> new NDArray[] {moe.forward(inner, in[0])}, moe.randomState())
                : new Recompute("recompute(mlp of layer " + layerNumber + ")",
                        (inner, in) -> new NDArray[] {mlp.forward(inner, in[0])}, Recompute.Replay.NONE);
        return scope.apply1(recompute, mlpIn);
    }

    /** A branch's output through its post norm, where the layer has one. */
    private static NDArray postNorm(AutogradScope scope, Norm norm, NDArray branch) {
        return norm == null ? branch : norm.forward(scope, branch);
    }

    private NDArray attend(AutogradScope scope, NDArray normed, InferenceContext inference, TokenPositions positions) {
        return inference == null ? attention.forward(scope, normed, positions)
                : attention.forward(scope, normed, inference.sequenceLengthOffset(), inference.keyValueCache(layerNumber));
    }
}
