package io.mcore4j.models.transformer;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.autograd.Recompute;
import io.mcore4j.core.nn.AbstractModule;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.tensorparallel.ColumnParallelLinear;
import io.mcore4j.tensorparallel.Mappings;
import io.mcore4j.tensorparallel.ParallelLinear;

/**
 * Multi-latent attention (DeepSeek-V2/V3; Megatron-Core's {@code MLASelfAttention}), causal, with the widths of
 * {@link TransformerConfig#multiLatentAttention()}:
 * <ul>
 * <li>queries: {@code linear_q_down_proj} (hidden → {@code qLoraRank}) → {@code q_layernorm} →
 *     {@code linear_q_up_proj} (→ per head {@code qkHeadDim} channels that do not rotate, then
 *     {@code qkPosEmbHeadDim} that do); with {@code qLoraRank} 0, {@code linear_q_proj} from the hidden states;
 * <li>keys and values: {@code linear_kv_down_proj} (hidden → {@code kvLoraRank} latent channels, then
 *     {@code qkPosEmbHeadDim} channels of one rotated key that every head shares); the latent through
 *     {@code kv_layernorm} and {@code linear_kv_up_proj} (→ per head {@code qkHeadDim} key channels, then
 *     {@code vHeadDim} value channels);
 * <li>RoPE on the rotated channels (with the config's scaling, YaRN's included), which DeepSeek stores as
 *     interleaved pairs {@code (x0, x1), (x2, x3), ...}: they are first laid out as evens then odds (as Megatron's MLA
 *     and transformers' {@code rope_interleave} do) and rotate in the rotate-half layout;
 * <li>the core attention of the layer spec over heads of {@code qkHeadDim + qkPosEmbHeadDim} channels (its scale
 *     {@code 1/sqrt(qkHeadDim + qkPosEmbHeadDim)}, times YaRN's {@link TransformerConfig.RopeScaling#softmaxScaleFactor()}
 *     through the queries), the values zero-padded to that width and cut back after;
 * <li>{@code linear_proj} (heads × {@code vHeadDim} → hidden).
 * </ul>
 * It is composed of DJL's ops and mcore4j's {@link io.mcore4j.core.autograd.Function}s, so it trains as it runs;
 * selective recompute of {@code core_attn} recomputes its core attention.
 *
 * <p>Tensor parallelism: the up-projections are column-parallel (each rank its heads) and {@code linear_proj}
 * row-parallel; the down-projections, whose outputs every head needs, are column-parallel with their outputs
 * gathered, so every rank holds the whole latent; the two norms are replicated. The rotated key that every head
 * shares enters the heads through a copy to the tensor-parallel region, so that its gradient sums every rank's heads
 * (the latent's gradient is summed by {@code linear_kv_up_proj}'s own input copy).
 *
 * <p>During generation the cache holds what DeepSeek's inference caches: per token the normalised latent and the
 * rotated shared key ({@code kvLoraRank + qkPosEmbHeadDim} values, one "group" for every head), not every head's keys
 * and values. {@code linear_kv_up_proj} is absorbed: each head's query channels that do not rotate are multiplied by
 * its key up-projection ({@code q W_UK} against the latent gives {@code q k}), the attention runs over the latent as
 * keys and values, and the heads' context over the latent goes through their value up-projection ({@code W_UV}) —
 * the same attention, reassociated. Where {@code linear_kv_up_proj} is not a plain column-parallel linear (a LoRA
 * adapter), the cache holds every head's keys and values instead. Not yet, and refused: sequence and context
 * parallelism, packed sequences and explicit position ids.
 */
public final class MultiLatentAttention extends AbstractModule implements Attention {
    private final ModelContext ctx;
    private final TransformerConfig.MlaDims dims;
    /** {@code linear_q_down_proj} and {@code q_layernorm}, or null where queries are not compressed. */
    private final ParallelLinear queryDown;
    private final Norm queryNorm;
    /** {@code linear_q_up_proj}, or {@code linear_q_proj} where queries are not compressed. */
    private final ParallelLinear queryUp;
    private final ParallelLinear keyValueDown;
    private final Norm keyValueNorm;
    private final ParallelLinear keyValueUp;
    private final ParallelLinear proj;
    private final CoreAttention core;
    private final RotaryEmbedding rope;
    /** YaRN's factor on the softmax scale, applied to the queries; 1 for none. */
    private final double queryScale;

    /**
     * @param ctx the model context: hidden size, heads, the MLA widths, norm, RoPE base and scaling, dtype, init stds
     *     and the TP group
     * @param spec the column- and row-parallel linears and the core attention
     * @param key checkpoint key prefix, e.g. {@code "decoder.layers.3.self_attention."}
     * @param layerNumber the layer's global index
     * @throws IllegalArgumentException without MLA widths in the config, for sequence or context parallelism, or
     *     heads the tensor-parallel size does not divide, naming the value
     */
    public MultiLatentAttention(ModelContext ctx, LayerSpec spec, String key, int layerNumber) {
        TransformerConfig c = ctx.config();
        int tp = ctx.groups().tp().size();
        if (c.multiLatentAttention() == null) {
            throw new IllegalArgumentException("multi-latent attention needs the config's MLA widths"
                    + " (TransformerConfig.Builder.multiLatentAttention), which are not set");
        }
        if (c.sequenceParallel() || ctx.groups().cp().size() > 1 || c.numAttentionHeads() % tp != 0) {
            throw new IllegalArgumentException("multi-latent attention runs without sequence or context parallelism, over"
                    + " heads the tensor-parallel size divides; got sequence parallel " + c.sequenceParallel()
                    + ", context parallel " + ctx.groups().cp().size() + ", " + c.numAttentionHeads() + " heads at TP" + tp);
        }
        this.ctx = ctx;
        this.dims = c.multiLatentAttention();
        int heads = c.numAttentionHeads();
        LayerSpec.LinearSettings queryHeads = new LayerSpec.LinearSettings(
                dims.compressesQueries() ? dims.qLoraRank() : c.hiddenSize(), heads * dims.queryKeyWidth(), false, false,
                c.initStd(), 1, null);
        if (dims.compressesQueries()) {
            this.queryDown = registerModule("linear_q_down_proj.", gathered(ctx, key + "linear_q_down_proj.",
                    c.hiddenSize(), dims.qLoraRank()));
            this.queryNorm = registerModule("q_layernorm.", new Norm(ctx, dims.qLoraRank(), false));
            this.queryUp = registerModule("linear_q_up_proj.", spec.linearQkv().create(ctx, key + "linear_q_up_proj.",
                    queryHeads));
        } else {
            this.queryDown = null;
            this.queryNorm = null;
            this.queryUp = registerModule("linear_q_proj.", spec.linearQkv().create(ctx, key + "linear_q_proj.", queryHeads));
        }
        this.keyValueDown = registerModule("linear_kv_down_proj.", gathered(ctx, key + "linear_kv_down_proj.",
                c.hiddenSize(), dims.kvLoraRank() + dims.qkPosEmbHeadDim()));
        this.keyValueNorm = registerModule("kv_layernorm.", new Norm(ctx, dims.kvLoraRank(), false));
        this.keyValueUp = registerModule("linear_kv_up_proj.", spec.linearQkv().create(ctx, key + "linear_kv_up_proj.",
                new LayerSpec.LinearSettings(dims.kvLoraRank(), heads * (dims.qkHeadDim() + dims.vHeadDim()), false,
                        false, c.initStd(), 1, null)));
        this.proj = registerModule("linear_proj.", spec.linearProj().create(ctx, key + "linear_proj.",
                new LayerSpec.LinearSettings(heads * dims.vHeadDim(), c.hiddenSize(), false, false, ctx.outputInitStd(), 1, null)));
        this.core = spec.coreAttention().create(ctx, layerNumber);
        TransformerConfig.RopeScaling scaling = c.ropeScaling(layerNumber);
        this.rope = new RotaryEmbedding(dims.qkPosEmbHeadDim(), 1, c.rotaryBase(layerNumber), scaling, ctx.parameters());
        this.queryScale = scaling == null ? 1 : scaling.softmaxScaleFactor();
    }

    /** A column-parallel linear whose output is gathered: every rank gets all of it (Megatron's "duplicated" output). */
    private static ParallelLinear gathered(ModelContext ctx, String key, int in, int out) {
        return ColumnParallelLinear.builder(in, out, ctx.groups().tp()).bias(false).gatherOutput(true)
                .initializer(ctx.initializer(key + "weight", ctx.config().initStd())).dtype(ctx.config().dtype())
                .manager(ctx.parameters()).name(key).build();
    }

    /** @return the MLA widths */
    public TransformerConfig.MlaDims dims() {
        return dims;
    }

    /**
     * @param scope the pass's scope
     * @param x normalised activations [s, b, h]
     * @return the attention output [s, b, h]
     */
    @Override
    public NDArray forward(AutogradScope scope, NDArray x) {
        return forward(scope, x, TokenPositions.DEFAULT);
    }

    /**
     * @throws IllegalArgumentException for packed sequences or explicit position ids, which multi-latent attention
     *     does not take yet
     */
    @Override
    public NDArray forward(AutogradScope scope, NDArray x, TokenPositions positions) {
        if (positions.sequences() != null || positions.positionIds() != null) {
            throw new IllegalArgumentException("multi-latent attention does not take packed sequences or explicit"
                    + " position ids yet (--reset-position-ids, --reset-attention-mask, packed SFT data)");
        }
        return scope.frame(() -> proj.forward(scope, scope.frame(() -> attend(scope, x, 0, null))).output());
    }

    @Override
    public NDArray forward(AutogradScope scope, NDArray x, long positionOffset, KeyValueCache cache) {
        return scope.frame(() -> proj.forward(scope, scope.frame(() -> attend(scope, x, positionOffset, cache))).output());
    }

    /** The heads' context [s, b, heads x vHeadDim]: over the pass's own tokens, or through {@code cache} when given. */
    private NDArray attend(AutogradScope scope, NDArray x, long positionOffset, KeyValueCache cache) {
        long s = x.getShape().get(0);
        long b = x.getShape().get(1);
        int nope = dims.qkHeadDim();
        int rotated = dims.qkPosEmbHeadDim();
        int width = dims.queryKeyWidth();
        NDArray q = queryUp.forward(scope, queryDown == null ? x
                : queryNorm.forward(scope, queryDown.forward(scope, x).output())).output();
        long heads = q.getShape().get(2) / width;
        NDList queryParts = attached(scope, Tensors.split(q.reshape(s, b, heads, width), new long[] {nope, rotated}, 3));
        NDList latentParts = attached(scope, Tensors.split(keyValueDown.forward(scope, x).output(),
                new long[] {dims.kvLoraRank(), rotated}, 2));
        NDArray latent = keyValueNorm.forward(scope, latentParts.get(0));
        NDArray queryRotating = evensThenOdds(queryParts.get(1));
        // the shared rotated key reaches this rank's heads only: its gradient is summed over the TP group's heads
        NDArray keyRotating = evensThenOdds(Mappings.copyToTensorParallelRegion(scope, ctx.groups().tp(),
                latentParts.get(1)).reshape(s, b, 1, rotated));
        NDArray[] rotatedQk = cache != null ? rope.apply(scope.manager(), queryRotating, keyRotating, positionOffset)
                : rope.apply(scope, queryRotating, keyRotating, null);
        if (cache != null && keyValueUp instanceof ColumnParallelLinear plain) {
            return attendLatent(scope, queryParts.get(0), rotatedQk, latent, plain.weight().data(), cache);
        }
        NDArray kv = keyValueUp.forward(scope, latent).output();
        NDList keyValueParts = attached(scope, Tensors.split(kv.reshape(s, b, heads, nope + dims.vHeadDim()),
                new long[] {nope, dims.vHeadDim()}, 3));
        NDArray sharedKey = rotatedQk[1].broadcast(s, b, heads, rotated);
        NDArray query = queryParts.get(0).concat(rotatedQk[0], 3);
        if (queryScale != 1) {
            query = query.mul(Tensors.scalar(queryScale, query, scope.manager()));
        }
        NDArray key = keyValueParts.get(0).concat(sharedKey, 3);
        NDArray value = keyValueParts.get(1);
        if (dims.vHeadDim() < width) {
            value = value.concat(DataTypes.zeros(scope.manager(), new Shape(s, b, heads, width - dims.vHeadDim()),
                    DataTypes.of(value), value.getDevice()), 3);
        }
        NDArray context = cache != null ? cache.attend(scope, query, key, value) : coreAttention(scope, query, key, value);
        return context.reshape(s, b, heads, width).get(":, :, :, :" + dims.vHeadDim()).reshape(s, b, heads * dims.vHeadDim());
    }

    /**
     * Generation's attention over the cached latents (see the class comment): the queries {@code [q W_UK, q_rotated]}
     * against the keys and values {@code [latent, k_rotated]} of one group, scaled so that the cache's
     * {@code 1/sqrt(kvLoraRank + qkPosEmbHeadDim)} becomes the layer's softmax scale; the heads' context over the latent
     * then through {@code W_UV}.
     *
     * @param queryNope the queries' channels that do not rotate [s, b, heads, qkHeadDim]
     * @param rotatedQk the rotated queries [s, b, heads, qkPosEmbHeadDim] and shared key [s, b, 1, qkPosEmbHeadDim]
     * @param latent the normalised latent [s, b, kvLoraRank]
     * @param upWeight this rank's {@code linear_kv_up_proj} weight [heads * (qkHeadDim + vHeadDim), kvLoraRank]
     * @return the heads' context [s, b, heads * vHeadDim]
     */
    private NDArray attendLatent(AutogradScope scope, NDArray queryNope, NDArray[] rotatedQk, NDArray latent,
                                 NDArray upWeight, KeyValueCache cache) {
        long s = queryNope.getShape().get(0);
        long b = queryNope.getShape().get(1);
        long heads = queryNope.getShape().get(2);
        int nope = dims.qkHeadDim();
        int rank = dims.kvLoraRank();
        int width = rank + dims.qkPosEmbHeadDim();
        NDList up = attached(scope, Tensors.split(upWeight.reshape(heads, nope + dims.vHeadDim(), rank),
                new long[] {nope, dims.vHeadDim()}, 1));
        // [heads, s*b, nope] x [heads, nope, rank]: each head's queries as queries of the latent
        NDArray absorbed = queryNope.transpose(2, 0, 1, 3).reshape(heads, s * b, nope).matMul(up.get(0))
                .reshape(heads, s, b, rank).transpose(1, 2, 0, 3);
        NDArray query = absorbed.concat(rotatedQk[0], 3);
        double scale = queryScale * Math.sqrt((double) width / dims.queryKeyWidth());
        query = query.mul(Tensors.scalar(scale, query, scope.manager()));
        NDArray key = latent.reshape(s, b, 1, rank).concat(rotatedQk[1], 3);
        NDArray context = cache.attend(scope, query, key, key).reshape(s, b, heads, width).get(":, :, :, :" + rank);
        // [heads, s*b, rank] x [heads, rank, v]: the context over the latent as each head's values
        return context.transpose(2, 0, 1, 3).reshape(heads, s * b, rank).matMul(up.get(1).transpose(0, 2, 1))
                .reshape(heads, s, b, dims.vHeadDim()).transpose(1, 2, 0, 3).reshape(s, b, heads * dims.vHeadDim());
    }

    /** The core attention of a training pass, recomputed in backward under selective recompute of {@code core_attn}. */
    private NDArray coreAttention(AutogradScope scope, NDArray query, NDArray key, NDArray value) {
        if (!ctx.config().recomputes(TransformerConfig.RecomputeModule.CORE_ATTN) || !scope.isGradEnabled()) {
            return core.forward(scope, query, key, value);
        }
        Recompute recompute = new Recompute("recompute(core attention)",
                (inner, in) -> new NDArray[] {core.forward(inner, in[0], in[1], in[2])},
                new DropoutReplay(ctx.attentionDropout()));
        return scope.apply1(recompute, query, key, value);
    }

    private static NDList attached(AutogradScope scope, NDList parts) {
        parts.attach(scope.manager());
        return parts;
    }

    /** DeepSeek's interleaved pairs {@code (x0, x1), (x2, x3), ...} of [s, b, n, d] as {@code x0, x2, ..., x1, x3, ...}. */
    private static NDArray evensThenOdds(NDArray x) {
        long[] shape = x.getShape().getShape();
        long d = shape[3];
        return x.reshape(shape[0], shape[1], shape[2], d / 2, 2).transpose(0, 1, 2, 4, 3).reshape(shape[0], shape[1], shape[2], d);
    }
}
