package io.mcore4j.models.transformer;

import ai.djl.ndarray.NDArray;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.autograd.Recompute;
import io.mcore4j.core.nn.Module;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.moe.MoeConfig;
import io.mcore4j.moe.MoeLayer;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A pre-norm transformer layer: {@code h = x + dropout(attention(norm(x)))},
 * {@code out = h + dropout(mlp(norm(h)))}. With full recompute the whole layer is recomputed in
 * backward; its dropout masks are replayed.
 */
public final class TransformerLayer implements Module {
    private final ModelContext ctx;
    private final int layerNumber;
    private final Norm inputNorm;
    private final SelfAttention attention;
    private final Norm preMlpNorm;
    private final Mlp mlp;
    private final MoeLayer moe;

    /**
     * @param ctx the model context
     * @param spec which implementations to use
     * @param layerNumber the global layer index (keys and seeds depend on it, not on the layout)
     */
    public TransformerLayer(ModelContext ctx, LayerSpec spec, int layerNumber) {
        TransformerConfig c = ctx.config();
        this.ctx = ctx;
        this.layerNumber = layerNumber;
        String key = keyPrefix(layerNumber);
        this.inputNorm = new Norm(ctx, c.hiddenSize());
        this.attention = new SelfAttention(ctx, spec, key + "self_attention.");
        this.preMlpNorm = new Norm(ctx, c.hiddenSize());
        if (c.isMoeLayer(layerNumber)) {
            this.mlp = null;
            this.moe = MoeLayer.build(moeConfig(c, ctx), c.hiddenSize(), ctx.groups(), ctx.parameters(), ctx.seeds(),
                    key + "mlp.", ctx.auxLossScale());
        } else {
            this.mlp = new Mlp(ctx, spec, key + "mlp.", c.ffnHiddenSize());
            this.moe = null;
        }
    }

    /**
     * @param layerNumber a global layer index
     * @return its checkpoint key prefix, {@code "decoder.layers.<n>."}
     */
    public static String keyPrefix(int layerNumber) {
        return "decoder.layers." + layerNumber + ".";
    }

    private static MoeConfig moeConfig(TransformerConfig c, ModelContext ctx) {
        TransformerConfig.MoeSettings m = c.moe();
        return MoeConfig.builder(m.numExperts(), m.topK(), m.ffnHiddenSize())
                .activation(c.activation() == TransformerConfig.Activation.SWIGLU ? MoeConfig.Activation.SWIGLU : MoeConfig.Activation.GELU)
                .auxLossCoeff(m.auxLossCoeff()).dispatcher(m.dispatcher()).initStd(c.initStd())
                .outputInitStd(ctx.outputInitStd()).dtype(c.dtype()).sequenceParallel(c.sequenceParallel())
                .addBias(c.addBiasLinear()).build();
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
    public NDArray forward(AutogradScope scope, NDArray x) {
        return forward(scope, x, null);
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
            return fused != null ? fused : compute(scope, x, inference);
        }
        // recompute saves activations for backward, so it follows grad mode; the dropout inside
        // follows training, which the recomputed runs inherit from this scope
        if (ctx.config().recompute() == TransformerConfig.Recompute.FULL && scope.isGradEnabled()) {
            Recompute recompute = new Recompute("recompute(layer " + layerNumber + ")",
                    (inner, in) -> new NDArray[] {compute(inner, in[0], null)},
                    new DropoutReplay(ctx.hiddenDropout(), ctx.attentionDropout()));
            return scope.apply1(recompute, x);
        }
        return compute(scope, x, null);
    }

    private NDArray compute(AutogradScope scope, NDArray x, InferenceContext inference) {
        double p = ctx.config().hiddenDropout();
        NDArray attnIn = inputNorm.forward(scope, x);
        NDArray attn = inference == null ? attention.forward(scope, attnIn)
                : attention.forward(scope, attnIn, inference.sequenceLengthOffset(), inference.keyValueCache(layerNumber));
        NDArray attnOut = Dropout.apply(scope, attn, p, ctx.hiddenDropout());
        NDArray h = x.add(attnOut);
        // a residual add saves nothing for backward: the branch's output dies here (the scope
        // keeps whatever a Function still refers to, libtorch whatever its graph saved)
        scope.release(attnIn, attn, attnOut);
        NDArray mlpIn = preMlpNorm.forward(scope, h);
        NDArray m = moe != null ? moe.forward(scope, mlpIn) : mlp.forward(scope, mlpIn);
        NDArray mlpOut = Dropout.apply(scope, m, p, ctx.hiddenDropout());
        NDArray out = h.add(mlpOut);
        scope.release(h, mlpIn, m, mlpOut);
        return out;
    }

    @Override
    public List<Parameter> parameters() {
        List<Parameter> out = new ArrayList<>(inputNorm.parameters());
        out.addAll(attention.parameters());
        out.addAll(preMlpNorm.parameters());
        out.addAll(moe != null ? moe.parameters() : mlp.parameters());
        return out;
    }

    @Override
    public Map<String, Parameter> namedParameters(String prefix) {
        String key = prefix + keyPrefix(layerNumber);
        Map<String, Parameter> out = new LinkedHashMap<>(inputNorm.namedParameters(key + "input_layernorm."));
        out.putAll(attention.namedParameters(key + "self_attention."));
        out.putAll(preMlpNorm.namedParameters(key + "pre_mlp_layernorm."));
        out.putAll(moe != null ? moe.namedParameters(key + "mlp.") : mlp.namedParameters(key + "mlp."));
        return out;
    }

    /**
     * The layer's checkpoint pieces. Dense parts held identically by every data- and
     * context-parallel rank are main replicas only on rank 0 of the {@code dp-cp} group; a mixture of experts describes its own replicas (different
     * DP ranks hold different experts).
     */
    @Override
    public List<ShardedTensor> shardedState(String prefix) {
        String key = prefix + keyPrefix(layerNumber);
        List<ShardedTensor> dense = new ArrayList<>(inputNorm.shardedState(key + "input_layernorm."));
        dense.addAll(attention.shardedState(key + "self_attention."));
        dense.addAll(preMlpNorm.shardedState(key + "pre_mlp_layernorm."));
        if (mlp != null) {
            dense.addAll(mlp.shardedState(key + "mlp."));
        }
        boolean dpReplica = ctx.groups().dpCp().rank() > 0;
        List<ShardedTensor> out = new ArrayList<>();
        for (ShardedTensor t : dense) {
            out.add(t.replicatedIf(dpReplica));
        }
        if (moe != null) {
            out.addAll(moe.shardedState(key + "mlp."));
        }
        return out;
    }
}
