package io.mcore4j.models.transformer;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.autograd.Cast;

/**
 * Causal scaled dot-product attention composed of libtorch ops (Megatron's "local" attention):
 * scores in float32, an additive causal mask, softmax, optional dropout on the probabilities.
 *
 * <p>With a context-parallel group of more than one rank, the inputs are this rank's part of the
 * sequence and the keys and values of the others are brought in by the configured
 * {@code cp_comm_type} ({@link ContextParallelAttention}); with one rank nothing changes.
 */
public final class DotProductAttention implements CoreAttention {
    private final ModelContext ctx;
    private final ContextParallelAttention contextParallel;

    /** @param ctx the model context (dropout probability and generator, context-parallel group) */
    public DotProductAttention(ModelContext ctx) {
        this.ctx = ctx;
        this.contextParallel = ctx.groups().cp().size() > 1 ? new ContextParallelAttention(ctx) : null;
    }

    @Override
    public NDArray forward(AutogradScope scope, NDArray query, NDArray key, NDArray value) {
        if (contextParallel != null) {
            return contextParallel.forward(scope, query, key, value);
        }
        long s = query.getShape().get(0);
        long b = query.getShape().get(1);
        long np = query.getShape().get(2);
        long d = query.getShape().get(3);
        long ng = key.getShape().get(2);
        // each key/value group serves np/ng consecutive query heads
        NDArray keys = ng != np ? key.repeat(2, np / ng) : key;
        NDArray values = ng != np ? value.repeat(2, np / ng) : value;
        DataType dtype = DataTypes.of(query);
        NDArray qT = query.transpose(1, 2, 0, 3);
        NDArray kT = keys.transpose(1, 2, 3, 0);
        NDArray vT = values.transpose(1, 2, 0, 3);
        NDArray q = qT.reshape(b * np, s, d);
        NDArray k = kT.reshape(b * np, d, s);
        NDArray v = vT.reshape(b * np, s, d);
        NDArray rawScores = q.matMul(k);
        NDArray scores32 = Cast.apply(scope, rawScores, DataType.FLOAT32);
        NDArray scores = Tensors.scale(scores32, 1.0 / Math.sqrt(d), scope.manager());
        NDArray mask = causalMask(scope, s);
        NDArray masked = scores.add(mask);
        NDArray probs32 = masked.softmax(-1);
        NDArray probs = Cast.apply(scope, probs32, dtype);
        // [b·np, s, s] float32 intermediates that backward does not need (softmax keeps its output);
        // a cast to the dtype it already has returns its input, so probs32 may live on as probs
        scope.release(qT, kT, vT, rawScores, scores32, scores, mask, masked, probs32 == probs ? null : probs32);
        if (keys != key) {
            scope.release(keys, values);
        }
        NDArray kept = Dropout.apply(scope, probs, ctx.config().attentionDropout(), ctx.attentionDropout());
        if (kept != probs) {
            scope.release(probs);
        }
        NDArray merged = kept.matMul(v);
        NDArray perHead = merged.reshape(b, np, s, d);
        NDArray sequenceFirst = perHead.transpose(2, 0, 1, 3);
        NDArray context = sequenceFirst.reshape(s, b, np * d);
        scope.release(q, k, v, kept, merged, perHead, sequenceFirst);
        return context;
    }

    /**
     * Additive mask [1, s, s]: 0 where a query may attend (key position ≤ query position), -10000
     * elsewhere; owned by the scope, its temporaries closed.
     */
    private static NDArray causalMask(AutogradScope scope, long s) {
        NDManager manager = scope.manager();
        NDArray pos = manager.arange(0, (int) s, 1, DataType.INT64);
        NDArray row = pos.reshape(1, s);
        NDArray column = pos.reshape(s, 1);
        NDArray future = row.gt(column);
        NDArray future32 = future.toType(DataType.FLOAT32, false);
        NDArray scaled = future32.mul(Tensors.scalar(-10000.0, future32, manager));
        NDArray mask = scaled.reshape(new Shape(1, s, s));
        scope.release(pos, row, column, future, future32, scaled);
        return mask;
    }
}
