package io.mcore4j.models.transformer;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.autograd.Cast;

/**
 * Causal scaled dot-product attention composed of libtorch ops (Megatron's "local" attention):
 * scores in float32, an additive causal mask, softmax, optional dropout on the probabilities.
 */
public final class DotProductAttention implements CoreAttention {
    private final ModelContext ctx;

    /** @param ctx the model context (dropout probability and generator) */
    public DotProductAttention(ModelContext ctx) {
        this.ctx = ctx;
    }

    @Override
    public NDArray forward(AutogradScope scope, NDArray query, NDArray key, NDArray value) {
        long s = query.getShape().get(0);
        long b = query.getShape().get(1);
        long np = query.getShape().get(2);
        long d = query.getShape().get(3);
        long ng = key.getShape().get(2);
        if (ng != np) {
            // each key/value group serves np/ng consecutive query heads
            key = key.repeat(2, np / ng);
            value = value.repeat(2, np / ng);
        }
        DataType dtype = query.getDataType();
        NDArray q = query.transpose(1, 2, 0, 3).reshape(b * np, s, d);
        NDArray k = key.transpose(1, 2, 3, 0).reshape(b * np, d, s);
        NDArray v = value.transpose(1, 2, 0, 3).reshape(b * np, s, d);
        NDArray scores = Tensors.scale(Cast.apply(scope, q.matMul(k), DataType.FLOAT32), 1.0 / Math.sqrt(d), scope.manager());
        NDArray probs = Cast.apply(scope, scores.add(causalMask(scope.manager(), s)).softmax(-1), dtype);
        double p = ctx.config().attentionDropout();
        if (p > 0 && scope.isGradEnabled()) {
            NDArray keep = ctx.attentionDropout().keepMask(scope.manager(), probs.getShape(), p, dtype);
            probs = Tensors.scale(probs.mul(keep), 1 / (1 - p), scope.manager());
        }
        NDArray context = probs.matMul(v).reshape(b, np, s, d).transpose(2, 0, 1, 3);
        return context.reshape(s, b, np * d);
    }

    /** Additive mask: 0 where a query may attend (key position ≤ query position), -10000 elsewhere. */
    private static NDArray causalMask(NDManager manager, long s) {
        NDArray pos = manager.arange(0, (int) s, 1, DataType.INT64);
        NDArray future = pos.reshape(1, s).gt(pos.reshape(s, 1));
        return future.toType(DataType.FLOAT32, false).mul(-10000.0f).reshape(new Shape(1, s, s));
    }
}
