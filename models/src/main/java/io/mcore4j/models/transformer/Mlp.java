package io.mcore4j.models.transformer;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.nn.Activation;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.nn.Module;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.models.TransformerConfig;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The MLP block: linear_fc1 → GELU, tanh GELU (or SwiGLU over a fused [gate; up] output) → linear_fc2.
 * Input and output are [s, b, h] (or [s/TP, b, h] with sequence parallelism).
 */
public final class Mlp implements Module {
    private final TransformerConfig.Activation activation;
    private final Linear fc1;
    private final Linear fc2;

    /**
     * @param ctx the model context
     * @param spec which linears to use
     * @param key checkpoint key prefix, e.g. {@code "decoder.layers.3.mlp."}
     * @param ffnHiddenSize the MLP width
     */
    public Mlp(ModelContext ctx, LayerSpec spec, String key, int ffnHiddenSize) {
        TransformerConfig c = ctx.config();
        this.activation = c.activation();
        boolean glu = activation == TransformerConfig.Activation.SWIGLU;
        this.fc1 = spec.linearFc1().create(ctx, key + "linear_fc1.", new LayerSpec.LinearSettings(
                c.hiddenSize(), glu ? 2 * ffnHiddenSize : ffnHiddenSize, c.addBiasLinear(), false, c.initStd(), glu ? 2 : 1));
        this.fc2 = spec.linearFc2().create(ctx, key + "linear_fc2.", new LayerSpec.LinearSettings(
                ffnHiddenSize, c.hiddenSize(), c.addBiasLinear(), false, ctx.outputInitStd(), 1));
    }

    /**
     * @param scope the pass's scope
     * @param x normalised activations
     * @return the MLP output, same shape as {@code x}
     */
    public NDArray forward(AutogradScope scope, NDArray x) {
        NDArray pre = fc1.forward(scope, x).output();
        NDArray h;
        if (activation == TransformerConfig.Activation.SWIGLU) {
            NDList parts = pre.split(2, pre.getShape().dimension() - 1);
            NDArray gate = parts.get(0);
            NDArray sigmoid = Activation.sigmoid(gate);
            NDArray silu = gate.mul(sigmoid);
            h = silu.mul(parts.get(1));
            // libtorch keeps what the products' backward needs; the handles go now
            scope.release(sigmoid, silu, parts.get(0), parts.get(1));
        } else if (activation == TransformerConfig.Activation.GELU_TANH) {
            h = geluTanh(scope, pre);
        } else {
            h = Activation.gelu(pre);
        }
        scope.release(pre);
        NDArray out = fc2.forward(scope, h).output();
        scope.release(h);
        return out;
    }

    /** GPT-2's GELU: {@code 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))}, from elementary ops (autograd follows them). */
    private static NDArray geluTanh(AutogradScope scope, NDArray x) {
        // number operands as device scalars: a Java number is a synchronising host copy on a GPU
        NDManager m = scope.manager();
        NDArray square = x.mul(x);
        NDArray cube = square.mul(x);
        NDArray inner = x.add(cube.mul(Tensors.scalar(0.044715, x, m)));
        NDArray t = inner.mul(Tensors.scalar(Math.sqrt(2 / Math.PI), x, m)).tanh();
        NDArray onePlus = t.add(Tensors.scalar(1, x, m));
        NDArray half = x.mul(Tensors.scalar(0.5, x, m));
        NDArray out = half.mul(onePlus);
        scope.release(square, cube, inner, t, onePlus, half);
        return out;
    }

    @Override
    public List<Parameter> parameters() {
        List<Parameter> out = new ArrayList<>(fc1.parameters());
        out.addAll(fc2.parameters());
        return out;
    }

    @Override
    public Map<String, Parameter> namedParameters(String prefix) {
        Map<String, Parameter> out = new LinkedHashMap<>(fc1.namedParameters(prefix + "linear_fc1."));
        out.putAll(fc2.namedParameters(prefix + "linear_fc2."));
        return out;
    }

    @Override
    public List<ShardedTensor> shardedState(String prefix) {
        List<ShardedTensor> out = new ArrayList<>(fc1.shardedState(prefix + "linear_fc1."));
        out.addAll(fc2.shardedState(prefix + "linear_fc2."));
        return out;
    }
}
