package io.mcore4j.models.transformer;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.autograd.Cast;
import io.mcore4j.core.nn.Module;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.models.TransformerConfig;

import java.util.ArrayList;
import java.util.List;

/**
 * LayerNorm (weight and bias) or RMSNorm (weight) over the last dim, accumulated in float32 whatever
 * the parameter dtype (libtorch's layer-norm kernel does so itself; RMSNorm casts). Its weights are replicated over tensor-parallel ranks; with sequence
 * parallelism each rank sees a different slice of the sequence, so they are
 * {@link Parameter.Kind#SEQUENCE_PARALLEL} (gradients summed over TP before data-parallel averaging).
 */
public final class Norm implements Module {
    private final TransformerConfig.Normalization kind;
    private final double epsilon;
    private final Parameter weight;
    private final Parameter bias;
    private final int tpRank;

    /**
     * @param ctx the model context (config, parameter manager, TP rank)
     * @param size normalised width
     */
    public Norm(ModelContext ctx, int size) {
        TransformerConfig c = ctx.config();
        this.kind = c.normalization();
        this.epsilon = c.normEpsilon();
        this.tpRank = ctx.groups().tensorParallelRank();
        Parameter.Kind paramKind = c.sequenceParallel() ? Parameter.Kind.SEQUENCE_PARALLEL : Parameter.Kind.DENSE;
        this.weight = new Parameter("weight", DataTypes.ones(ctx.parameters(), new Shape(size), c.dtype(), ctx.parameters().getDevice()),
                Parameter.Partition.NONE, paramKind);
        this.bias = kind == TransformerConfig.Normalization.LAYER_NORM
                ? new Parameter("bias", DataTypes.zeros(ctx.parameters(), new Shape(size), c.dtype()), Parameter.Partition.NONE, paramKind)
                : null;
    }

    /**
     * @param scope the pass's scope
     * @param x activations [..., size]
     * @return normalised activations in x's dtype
     */
    public NDArray forward(AutogradScope scope, NDArray x) {
        if (kind == TransformerConfig.Normalization.LAYER_NORM) {
            // libtorch's layer norm accumulates half-precision inputs in float32 internally: no casts needed
            long width = x.getShape().get(x.getShape().dimension() - 1);
            return ai.djl.nn.norm.LayerNorm.layerNorm(x, new Shape(width), weight.data(), bias.data(), (float) epsilon).get(0);
        }
        // RMSNorm from elementary ops: square and mean in float32, where x^2 cannot overflow
        DataType dtype = DataTypes.of(x);
        NDArray x32 = Cast.apply(scope, x, DataType.FLOAT32);
        NDArray square = x32.square();
        NDArray meanSquare = square.mean(new int[] {-1}, true);
        NDArray shifted = meanSquare.add(Tensors.scalar(epsilon, meanSquare, scope.manager()));
        NDArray rms = shifted.sqrt();
        NDArray normalized = x32.div(rms);
        NDArray w32 = Cast.apply(scope, weight.data(), DataType.FLOAT32);
        NDArray y = normalized.mul(w32);
        NDArray out = Cast.apply(scope, y, dtype);
        // a cast to the dtype a tensor already has returns it: x (the caller's), the weight and the
        // result itself are never released; the scope also keeps what its recorded casts refer to
        scope.release(x32 == x ? null : x32, square, meanSquare, shifted, rms, normalized,
                w32 == weight.data() ? null : w32, y == out ? null : y);
        return out;
    }

    @Override
    public List<Parameter> parameters() {
        List<Parameter> out = new ArrayList<>();
        out.add(weight);
        if (bias != null) {
            out.add(bias);
        }
        return out;
    }

    /** Every TP rank holds the same norm weights: rank 0's copy is the main replica. */
    @Override
    public List<ShardedTensor> shardedState(String prefix) {
        List<ShardedTensor> out = new ArrayList<>();
        for (Parameter p : parameters()) {
            out.add(p.sharded(prefix, tpRank));
        }
        return out;
    }
}
