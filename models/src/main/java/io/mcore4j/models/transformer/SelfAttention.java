package io.mcore4j.models.transformer;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDList;
import io.mcore4j.contextparallel.ContextParallelSplit;
import io.mcore4j.core.PackedSequences;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.autograd.Recompute;
import io.mcore4j.core.fp8.Fp8Scaling;
import io.mcore4j.core.nn.AbstractModule;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.tensorparallel.ParallelLinear;

/**
 * Causal self-attention with grouped queries: linear_qkv → (per-head query and key norms) → (RoPE) →
 * core attention → linear_proj. A {@link TransformerConfig#softmaxScale()} other than {@code 1/sqrt(d)} scales
 * the queries by {@code softmaxScale·sqrt(d)} before the core attention, whose own {@code 1/sqrt(d)} then gives
 * the scores that scale (every core attention, the fused and the context-parallel ones and the generation
 * cache's, keeps one scale). A layer with a sliding window rotates with {@link TransformerConfig#rotaryBase(int)}.
 *
 * <p>The fused QKV output is laid out group by group, each group holding its
 * {@code heads/groups} query heads, then its key head, then its value head, so splitting the output
 * dim into equal contiguous parts gives every tensor-parallel rank whole groups. With selective
 * recompute the core attention is recomputed in backward instead of keeping its activations.
 */
public final class SelfAttention extends AbstractModule implements Attention {
    private final ModelContext ctx;
    private final ParallelLinear qkv;
    private final ParallelLinear proj;
    private final CoreAttention core;
    private final RotaryEmbedding rope;
    /** Megatron's q_layernorm and k_layernorm (per head, over its channels), or null. */
    private final Norm queryNorm;
    private final Norm keyNorm;
    private final ContextParallelSplit contextParallel;
    private final int headsPerGroup;
    private final int headDim;
    /** The factor of the queries that turns the core attention's 1/sqrt(d) into the config's softmax scale, or 1. */
    private final double queryScale;

    /**
     * @param ctx the model context
     * @param spec which linears and core attention to use
     * @param key checkpoint key prefix, e.g. {@code "decoder.layers.3.self_attention."}
     * @param layerNumber the layer's global index (its sliding window, if any)
     */
    public SelfAttention(ModelContext ctx, LayerSpec spec, String key, int layerNumber) {
        TransformerConfig c = ctx.config();
        this.ctx = ctx;
        this.headsPerGroup = c.numAttentionHeads() / c.numQueryGroups();
        this.headDim = c.kvChannels();
        int qkvSize = (c.numAttentionHeads() + 2 * c.numQueryGroups()) * headDim;
        int projIn = c.numAttentionHeads() * headDim;
        Fp8Scaling fp8 = spec.fp8For(c, layerNumber);
        this.qkv = registerModule("linear_qkv.", spec.linearQkv().create(ctx, key + "linear_qkv.",
                new LayerSpec.LinearSettings(c.hiddenSize(), qkvSize, c.addBiasLinear() || c.addQkvBias(), false, c.initStd(), 1, fp8)));
        this.proj = registerModule("linear_proj.", spec.linearProj().create(ctx, key + "linear_proj.",
                new LayerSpec.LinearSettings(projIn, c.hiddenSize(), c.addBiasLinear(), false, ctx.outputInitStd(), 1, fp8)));
        this.core = spec.coreAttention().create(ctx, layerNumber);
        // every rank normalises its own heads with the same weights: their gradients are summed over TP
        this.queryNorm = c.qkLayernorm() ? registerModule("q_layernorm.", new Norm(ctx, headDim, true)) : null;
        this.keyNorm = c.qkLayernorm() ? registerModule("k_layernorm.", new Norm(ctx, headDim, true)) : null;
        this.rope = c.usesRope() ? new RotaryEmbedding(headDim, c.rotaryPercent(), c.rotaryBase(layerNumber),
                c.ropeScaling(layerNumber), ctx.parameters()) : null;
        this.queryScale = c.softmaxScale() > 0 ? c.softmaxScale() * Math.sqrt(headDim) : 1;
        this.contextParallel = ContextParallelSplit.of(ctx.groups().cp());
    }

    /**
     * @param scope the pass's scope
     * @param x normalised activations [s, b, h] (or [s/TP, b, h] with sequence parallelism), where
     *     {@code s} is this rank's part of the sequence under context parallelism
     * @return the attention output, same shape as {@code x}
     */
    @Override
    public NDArray forward(AutogradScope scope, NDArray x) {
        return forward(scope, x, TokenPositions.DEFAULT);
    }

    /**
     * Attention of a training pass whose tokens may sit at explicit positions and in packed sequences.
     *
     * @param scope the pass's scope
     * @param x normalised activations [s, b, h] (or [s/TP, b, h] with sequence parallelism)
     * @param positions the tokens' position ids (rotary embeddings read them) and packed sequences (the
     *     core attention masks by them)
     * @return the attention output, same shape as {@code x}
     */
    @Override
    public NDArray forward(AutogradScope scope, NDArray x, TokenPositions positions) {
        return scope.frame(() -> proj.forward(scope, scope.frame(() -> attend(scope, x, 0, null, positions))).output());
    }

    /**
     * Attention during generation: the queries attend over the cached keys and values of earlier
     * tokens as well as the pass's own, and rotary embeddings start at the tokens' positions.
     *
     * @param scope the pass's scope
     * @param x normalised activations [s, b, h]
     * @param positionOffset position of the pass's first token in its sequences
     * @param cache this layer's key/value cache, which replaces the core attention; null for the training path
     * @return the attention output, same shape as {@code x}
     */
    @Override
    public NDArray forward(AutogradScope scope, NDArray x, long positionOffset, KeyValueCache cache) {
        // the fused QKV output and its views die with the inner frame, consumed by the core
        // attention, which keeps (through libtorch or the scope) whatever its backward needs
        return scope.frame(() -> proj.forward(scope, scope.frame(() -> attend(scope, x, positionOffset, cache,
                TokenPositions.DEFAULT))).output());
    }

    private NDArray attend(AutogradScope scope, NDArray x, long positionOffset, KeyValueCache cache, TokenPositions positions) {
        NDArray mixed = qkv.forward(scope, x).output();
        PackedSequences packed = positions.sequences();
        if (rope == null && queryNorm == null && queryScale == 1 && cache == null && packed == null
                && core instanceof SdpaAttention sdpa
                && sdpa.packsQkvGradients()
                && !ctx.config().recomputes(TransformerConfig.RecomputeModule.CORE_ATTN)) {
            return sdpa.forwardFused(scope, mixed);
        }
        long s = mixed.getShape().get(0);
        long b = mixed.getShape().get(1);
        long groups = mixed.getShape().get(2) / ((headsPerGroup + 2L) * headDim);
        NDArray grouped = mixed.reshape(s, b, groups, headsPerGroup + 2, headDim);
        // one split rather than three slices: its backward writes the three gradients into one
        // tensor (a concatenation), where each slice's backward would fill a zero tensor of the
        // full size and the three would then be summed
        NDList parts = Tensors.split(grouped, new long[] {headsPerGroup, 1, 1}, 3);
        parts.attach(scope.manager());
        NDArray queryGroups = parts.get(0);
        NDArray query = queryGroups.reshape(s, b, groups * headsPerGroup, headDim);
        NDArray key = parts.get(1).reshape(s, b, groups, headDim);
        NDArray value = parts.get(2).reshape(s, b, groups, headDim);
        if (queryNorm != null) {
            query = queryNorm.forward(scope, query);
            key = keyNorm.forward(scope, key);
        }
        NDArray rotatedQuery = query;
        NDArray rotatedKey = key;
        if (rope != null) {
            // explicit position ids (packed sequences), else a context-parallel rank's tokens sit at their
            // global positions (two chunks of the sequence)
            NDArray ids = positions.positionIds();
            NDArray[] rotated;
            if (cache != null) {
                rotated = rope.apply(scope.manager(), query, key, positionOffset);
            } else if (ids != null) {
                rotated = rope.applyPositionIds(scope, query, key, ids, value);
            } else {
                rotated = rope.apply(scope, query, key,
                        contextParallel.size() > 1 ? contextParallel.positions(contextParallel.sequenceLength(s)) : null, value);
            }
            rotatedQuery = rotated[0];
            rotatedKey = rotated[1];
            if (cache == null) {
                value = rotated[2];
            }
        }
        if (queryScale != 1) {
            rotatedQuery = rotatedQuery.mul(Tensors.scalar(queryScale, rotatedQuery, scope.manager()));
        }
        if (cache != null) {
            return cache.attend(scope, rotatedQuery, rotatedKey, value);
        }
        if (ctx.config().recomputes(TransformerConfig.RecomputeModule.CORE_ATTN) && scope.isGradEnabled()) {
            Recompute recompute = new Recompute("recompute(core attention)",
                    (inner, in) -> new NDArray[] {core.forward(inner, in[0], in[1], in[2], packed)},
                    new DropoutReplay(ctx.attentionDropout()));
            return scope.apply1(recompute, rotatedQuery, rotatedKey, value);
        }
        return core.forward(scope, rotatedQuery, rotatedKey, value, packed);
    }
}
