package io.mcore4j.models.transformer;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.nn.AbstractModule;
import io.mcore4j.core.nn.UnaryModule;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.tensorparallel.ColumnParallelLinear;
import io.mcore4j.tensorparallel.ParallelLinear;

/**
 * Multi-latent attention (DeepSeek-V2/V3; Megatron-Core's {@code MLASelfAttention}), causal, in a training pass:
 * <ul>
 * <li>queries: {@code linear_q_down_proj} (hidden → {@code qLoraRank}) → {@code q_layernorm} →
 *     {@code linear_q_up_proj} (→ per head {@code qkHeadDim} channels that do not rotate, then
 *     {@code qkPosEmbHeadDim} that do);
 * <li>keys and values: {@code linear_kv_down_proj} (hidden → {@code kvLoraRank} latent channels, then
 *     {@code qkPosEmbHeadDim} channels of one rotated key that every head shares); the latent through
 *     {@code kv_layernorm} and {@code linear_kv_up_proj} (→ per head {@code qkHeadDim} key channels, then
 *     {@code vHeadDim} value channels);
 * <li>RoPE on the rotated channels, which DeepSeek stores as interleaved pairs {@code (x0, x1), (x2, x3), ...}:
 *     they are first laid out as evens then odds (as Megatron's MLA and transformers' {@code rope_interleave} do)
 *     and rotate in the rotate-half layout;
 * <li>the core attention of the layer spec over heads of {@code qkHeadDim + qkPosEmbHeadDim} channels (its scale
 *     {@code 1/sqrt(qkHeadDim + qkPosEmbHeadDim)}), the values zero-padded to that width and cut back after;
 * <li>{@code linear_proj} (heads × {@code vHeadDim} → hidden).
 * </ul>
 *
 * <p>Tensor parallelism: the up-projections are column-parallel (each rank its heads) and {@code linear_proj}
 * row-parallel; the down-projections, whose outputs every head needs, are column-parallel with their outputs
 * gathered, so every rank holds the whole latent; the two norms are replicated. Not yet: sequence and context
 * parallelism, YaRN's scaling, a KV cache of the latent, and a model built of these layers
 * ({@code DeepseekV3ForCausalLM}); this module is the tested piece that layer will use.
 */
public final class MultiLatentAttention extends AbstractModule implements UnaryModule {
    /**
     * Megatron-Core's MLA dimensions ({@code --q-lora-rank}, {@code --kv-lora-rank}, {@code --qk-head-dim},
     * {@code --qk-pos-emb-head-dim}, {@code --v-head-dim}).
     *
     * @param qLoraRank width of the queries' latent, at least 1 (DeepSeek-V3: 1536)
     * @param kvLoraRank width of the keys' and values' latent, at least 1 (512)
     * @param qkHeadDim channels per query and key head that do not rotate, at least 1 (128)
     * @param qkPosEmbHeadDim channels per query and key head that rotate, even, at least 2 (64)
     * @param vHeadDim channels per value head, at least 1 and at most {@code qkHeadDim + qkPosEmbHeadDim} (128)
     */
    public record Dims(int qLoraRank, int kvLoraRank, int qkHeadDim, int qkPosEmbHeadDim, int vHeadDim) {
        /**
         * Checks the widths.
         *
         * @throws IllegalArgumentException naming the value and what was expected
         */
        public Dims {
            if (qLoraRank < 1 || kvLoraRank < 1 || qkHeadDim < 1 || vHeadDim < 1) {
                throw new IllegalArgumentException("MLA widths must be at least 1: q_lora_rank " + qLoraRank
                        + ", kv_lora_rank " + kvLoraRank + ", qk_head_dim " + qkHeadDim + ", v_head_dim " + vHeadDim);
            }
            if (qkPosEmbHeadDim < 2 || qkPosEmbHeadDim % 2 != 0) {
                throw new IllegalArgumentException("qk_pos_emb_head_dim " + qkPosEmbHeadDim + " must be even and at least 2"
                        + " (RoPE rotates pairs of channels)");
            }
            if (vHeadDim > qkHeadDim + qkPosEmbHeadDim) {
                throw new IllegalArgumentException("v_head_dim " + vHeadDim + " must be at most qk_head_dim + "
                        + "qk_pos_emb_head_dim = " + (qkHeadDim + qkPosEmbHeadDim) + " (values are padded to the query width)");
            }
        }

        /** @return channels per query and key head, {@code qkHeadDim + qkPosEmbHeadDim} */
        public int queryKeyWidth() {
            return qkHeadDim + qkPosEmbHeadDim;
        }
    }

    private final Dims dims;
    private final ParallelLinear queryDown;
    private final Norm queryNorm;
    private final ParallelLinear queryUp;
    private final ParallelLinear keyValueDown;
    private final Norm keyValueNorm;
    private final ParallelLinear keyValueUp;
    private final ParallelLinear proj;
    private final CoreAttention core;
    private final RotaryEmbedding rope;

    /**
     * @param ctx the model context: hidden size, heads, norm, RoPE base, dtype, init stds and the TP group
     * @param spec the column- and row-parallel linears and the core attention
     * @param key checkpoint key prefix, e.g. {@code "decoder.layers.3.self_attention."}
     * @param layerNumber the layer's global index
     * @param dims the MLA widths
     * @throws IllegalArgumentException for sequence or context parallelism, RoPE scaling, a sliding window, or heads
     *     the tensor-parallel size does not divide
     */
    public MultiLatentAttention(ModelContext ctx, LayerSpec spec, String key, int layerNumber, Dims dims) {
        TransformerConfig c = ctx.config();
        int tp = ctx.groups().tp().size();
        if (c.sequenceParallel() || ctx.groups().cp().size() > 1 || c.ropeScaling(layerNumber) != null
                || c.windowSize(layerNumber) >= 0 || !c.usesRope() || c.numAttentionHeads() % tp != 0) {
            throw new IllegalArgumentException("multi-latent attention runs with RoPE, without scaling, windows, sequence"
                    + " or context parallelism, over heads the tensor-parallel size divides; got rope "
                    + c.positionEmbedding() + " scaling " + c.ropeScaling(layerNumber) + ", window "
                    + c.windowSize(layerNumber) + ", sequence parallel " + c.sequenceParallel() + ", context parallel "
                    + ctx.groups().cp().size() + ", " + c.numAttentionHeads() + " heads at TP" + tp);
        }
        this.dims = dims;
        int heads = c.numAttentionHeads();
        this.queryDown = registerModule("linear_q_down_proj.", gathered(ctx, key + "linear_q_down_proj.",
                c.hiddenSize(), dims.qLoraRank()));
        this.queryNorm = registerModule("q_layernorm.", new Norm(ctx, dims.qLoraRank(), false));
        this.queryUp = registerModule("linear_q_up_proj.", spec.linearQkv().create(ctx, key + "linear_q_up_proj.",
                new LayerSpec.LinearSettings(dims.qLoraRank(), heads * dims.queryKeyWidth(), false, false, c.initStd(), 1)));
        this.keyValueDown = registerModule("linear_kv_down_proj.", gathered(ctx, key + "linear_kv_down_proj.",
                c.hiddenSize(), dims.kvLoraRank() + dims.qkPosEmbHeadDim()));
        this.keyValueNorm = registerModule("kv_layernorm.", new Norm(ctx, dims.kvLoraRank(), false));
        this.keyValueUp = registerModule("linear_kv_up_proj.", spec.linearQkv().create(ctx, key + "linear_kv_up_proj.",
                new LayerSpec.LinearSettings(dims.kvLoraRank(), heads * (dims.qkHeadDim() + dims.vHeadDim()), false,
                        false, c.initStd(), 1)));
        this.proj = registerModule("linear_proj.", spec.linearProj().create(ctx, key + "linear_proj.",
                new LayerSpec.LinearSettings(heads * dims.vHeadDim(), c.hiddenSize(), false, false, ctx.outputInitStd(), 1)));
        this.core = spec.coreAttention().create(ctx, layerNumber);
        this.rope = new RotaryEmbedding(dims.qkPosEmbHeadDim(), 1, c.rotaryBase(layerNumber), null, ctx.parameters());
    }

    /** A column-parallel linear whose output is gathered: every rank gets all of it (Megatron's "duplicated" output). */
    private static ParallelLinear gathered(ModelContext ctx, String key, int in, int out) {
        return ColumnParallelLinear.builder(in, out, ctx.groups().tp()).bias(false).gatherOutput(true)
                .initializer(ctx.initializer(key + "weight", ctx.config().initStd())).dtype(ctx.config().dtype())
                .manager(ctx.parameters()).name(key).build();
    }

    /** @return the MLA widths */
    public Dims dims() {
        return dims;
    }

    /**
     * @param scope the pass's scope
     * @param x normalised activations [s, b, h]
     * @return the attention output [s, b, h]
     */
    @Override
    public NDArray forward(AutogradScope scope, NDArray x) {
        return scope.frame(() -> proj.forward(scope, scope.frame(() -> attend(scope, x))).output());
    }

    private NDArray attend(AutogradScope scope, NDArray x) {
        long s = x.getShape().get(0);
        long b = x.getShape().get(1);
        int nope = dims.qkHeadDim();
        int rotated = dims.qkPosEmbHeadDim();
        int width = dims.queryKeyWidth();
        NDArray q = queryUp.forward(scope, queryNorm.forward(scope, queryDown.forward(scope, x).output())).output();
        long heads = q.getShape().get(2) / width;
        NDList queryParts = attached(scope, Tensors.split(q.reshape(s, b, heads, width), new long[] {nope, rotated}, 3));
        NDList latentParts = attached(scope, Tensors.split(keyValueDown.forward(scope, x).output(),
                new long[] {dims.kvLoraRank(), rotated}, 2));
        NDArray kv = keyValueUp.forward(scope, keyValueNorm.forward(scope, latentParts.get(0))).output();
        NDList keyValueParts = attached(scope, Tensors.split(kv.reshape(s, b, heads, nope + dims.vHeadDim()),
                new long[] {nope, dims.vHeadDim()}, 3));
        NDArray[] rotatedQk = rope.apply(scope, evensThenOdds(queryParts.get(1)),
                evensThenOdds(latentParts.get(1).reshape(s, b, 1, rotated)), null);
        NDArray sharedKey = rotatedQk[1].broadcast(s, b, heads, rotated);
        NDArray query = queryParts.get(0).concat(rotatedQk[0], 3);
        NDArray key = keyValueParts.get(0).concat(sharedKey, 3);
        NDArray value = keyValueParts.get(1);
        if (dims.vHeadDim() < width) {
            value = value.concat(scope.manager().zeros(new Shape(s, b, heads, width - dims.vHeadDim()),
                    value.getDataType(), value.getDevice()), 3);
        }
        NDArray context = core.forward(scope, query, key, value).reshape(s, b, heads, width);
        return context.get(":, :, :, :" + dims.vHeadDim()).reshape(s, b, heads * dims.vHeadDim());
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
