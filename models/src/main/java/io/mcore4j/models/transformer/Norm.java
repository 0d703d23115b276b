package io.mcore4j.models.transformer;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.autograd.Cast;
import io.mcore4j.core.nn.AbstractModule;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.nn.UnaryModule;
import io.mcore4j.models.TransformerConfig;

/**
 * LayerNorm (weight and bias) or RMSNorm (weight) over the last dim, accumulated in float32 whatever
 * the parameter dtype (libtorch's layer-norm kernel does so itself; RMSNorm casts). Its weights are replicated over tensor-parallel ranks; with sequence
 * parallelism each rank sees a different slice of the sequence, so they are
 * {@link Parameter.Kind#SEQUENCE_PARALLEL} (gradients summed over TP before data-parallel averaging).
 * Every TP rank holds the same weights: rank 0's copy is the main replica in checkpoints.
 */
public final class Norm extends AbstractModule implements UnaryModule {
    private final TransformerConfig.Normalization kind;
    private final double epsilon;
    private final Parameter weight;
    private final Parameter bias;

    /**
     * @param ctx the model context (config, parameter manager, TP rank)
     * @param size normalised width
     */
    public Norm(ModelContext ctx, int size) {
        TransformerConfig c = ctx.config();
        this.kind = c.normalization();
        this.epsilon = c.normEpsilon();
        int tpRank = ctx.groups().tensorParallelRank();
        Parameter.Kind paramKind = c.sequenceParallel() ? Parameter.Kind.SEQUENCE_PARALLEL : Parameter.Kind.DENSE;
        this.weight = registerParameter("", new Parameter("weight", DataTypes.ones(ctx.parameters(), new Shape(size), c.dtype(), ctx.parameters().getDevice()),
                Parameter.Partition.NONE, paramKind), tpRank);
        this.bias = kind == TransformerConfig.Normalization.LAYER_NORM
                ? registerParameter("", new Parameter("bias", DataTypes.zeros(ctx.parameters(), new Shape(size), c.dtype()),
                        Parameter.Partition.NONE, paramKind), tpRank)
                : null;
    }

    /**
     * @param scope the pass's scope
     * @param x activations [..., size]
     * @return normalised activations in x's dtype
     */
    @Override
    public NDArray forward(AutogradScope scope, NDArray x) {
        if (kind == TransformerConfig.Normalization.LAYER_NORM) {
            // libtorch's layer norm accumulates half-precision inputs in float32 internally: no casts needed
            long width = x.getShape().get(x.getShape().dimension() - 1);
            // DJL gives the result x's manager: it belongs to the pass's current frame instead
            return Tensors.own(ai.djl.nn.norm.LayerNorm.layerNorm(x, new Shape(width), weight.data(), bias.data(),
                    (float) epsilon).get(0), scope.manager());
        }
        // RMSNorm from elementary ops: square and mean in float32, where x^2 cannot overflow; its
        // float32 temporaries die with the frame
        return scope.frame(x, in -> rmsNorm(scope, in));
    }

    private NDArray rmsNorm(AutogradScope scope, NDArray x) {
        DataType dtype = DataTypes.of(x);
        NDArray x32 = Cast.apply(scope, x, DataType.FLOAT32);
        NDArray square = x32.square();
        NDArray meanSquare = square.mean(new int[] {-1}, true);
        NDArray shifted = meanSquare.add(Tensors.scalar(epsilon, meanSquare, scope.manager()));
        NDArray rms = shifted.sqrt();
        NDArray normalized = x32.div(rms);
        NDArray w32 = Cast.apply(scope, weight.data(), DataType.FLOAT32);
        NDArray y = normalized.mul(w32);
        return Cast.apply(scope, y, dtype);
    }
}
