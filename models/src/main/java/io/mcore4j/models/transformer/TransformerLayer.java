package io.mcore4j.models.transformer;

import ai.djl.ndarray.NDArray;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.autograd.Recompute;
import io.mcore4j.core.nn.Module;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.models.TransformerConfig;

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
        this.mlp = new Mlp(ctx, spec, key + "mlp.", c.ffnHiddenSize());
    }

    /**
     * @param layerNumber a global layer index
     * @return its checkpoint key prefix, {@code "decoder.layers.<n>."}
     */
    public static String keyPrefix(int layerNumber) {
        return "decoder.layers." + layerNumber + ".";
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
        if (ctx.config().recompute() == TransformerConfig.Recompute.FULL && scope.isGradEnabled()) {
            Recompute recompute = new Recompute("recompute(layer " + layerNumber + ")",
                    (inner, in) -> new NDArray[] {compute(inner, in[0])},
                    new DropoutReplay(ctx.hiddenDropout(), ctx.attentionDropout()));
            return scope.apply1(recompute, x);
        }
        return compute(scope, x);
    }

    private NDArray compute(AutogradScope scope, NDArray x) {
        double p = ctx.config().hiddenDropout();
        NDArray attn = attention.forward(scope, inputNorm.forward(scope, x));
        NDArray h = x.add(Dropout.apply(scope, attn, p, ctx.hiddenDropout()));
        NDArray m = mlp.forward(scope, preMlpNorm.forward(scope, h));
        return h.add(Dropout.apply(scope, m, p, ctx.hiddenDropout()));
    }

    @Override
    public List<Parameter> parameters() {
        List<Parameter> out = new ArrayList<>(inputNorm.parameters());
        out.addAll(attention.parameters());
        out.addAll(preMlpNorm.parameters());
        out.addAll(mlp.parameters());
        return out;
    }

    @Override
    public Map<String, Parameter> namedParameters(String prefix) {
        String key = prefix + keyPrefix(layerNumber);
        Map<String, Parameter> out = new LinkedHashMap<>(inputNorm.namedParameters(key + "input_layernorm."));
        out.putAll(attention.namedParameters(key + "self_attention."));
        out.putAll(preMlpNorm.namedParameters(key + "pre_mlp_layernorm."));
        out.putAll(mlp.namedParameters(key + "mlp."));
        return out;
    }

    @Override
    public List<ShardedTensor> shardedState(String prefix) {
        String key = prefix + keyPrefix(layerNumber);
        List<ShardedTensor> out = new ArrayList<>(inputNorm.shardedState(key + "input_layernorm."));
        out.addAll(attention.shardedState(key + "self_attention."));
        out.addAll(preMlpNorm.shardedState(key + "pre_mlp_layernorm."));
        out.addAll(mlp.shardedState(key + "mlp."));
        return out;
    }
}
