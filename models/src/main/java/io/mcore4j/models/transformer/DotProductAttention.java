package io.mcore4j.models.transformer;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.contextparallel.CpCommType;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.PackedSequences;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.autograd.Cast;
import io.mcore4j.core.autograd.Frame;
import io.mcore4j.parallel.Communicator;

/**
 * Causal scaled dot-product attention composed of libtorch ops (Megatron's "local" attention):
 * scores in float32, an additive causal mask, softmax, optional dropout on the probabilities.
 *
 * <p>With a context-parallel group of more than one rank, the inputs are this rank's part of the
 * sequence and the keys and values of the others are brought in by the configured
 * {@code cp_comm_type} ({@link ContextParallelAttention}), or for {@code a2a} the heads are exchanged
 * for the whole sequence ({@link UlyssesAttention}), or for {@code a2a+p2p} the heads are exchanged for
 * the tokens of the first hierarchical level, which the ring over the second level attends; with one
 * rank nothing changes.
 *
 * <p>Packed sequences replace the causal mask with a block-diagonal causal one
 * ({@link PackedAttentionMask}): no query attends a key of another sequence.
 */
public final class DotProductAttention implements CoreAttention {
    private final ModelContext ctx;
    private final ContextParallelAttention contextParallel;
    private final UlyssesAttention ulysses;

    /**
     * @param ctx the model context (dropout probability and generator, context-parallel groups)
     * @throws IllegalArgumentException if {@code --cp-comm-type a2a} or {@code a2a+p2p} cannot scatter this
     *     rank's heads, or {@code a2a+p2p} finds no hierarchical context-parallel groups
     */
    public DotProductAttention(ModelContext ctx) {
        this.ctx = ctx;
        Communicator ring = CpCommGroups.ring(ctx);
        boolean allGather = ctx.config().cpCommType() == CpCommType.ALL_GATHER && ctx.groups().cp().size() > 1;
        this.contextParallel = allGather ? new ContextParallelAttention(ctx, ctx.groups().cp(), true)
                : ring != null ? new ContextParallelAttention(ctx, ring, false) : null;
        this.ulysses = UlyssesAttention.of(ctx);
    }

    @Override
    public NDArray forward(AutogradScope scope, NDArray query, NDArray key, NDArray value) {
        return forward(scope, query, key, value, null);
    }

    @Override
    public NDArray forward(AutogradScope scope, NDArray query, NDArray key, NDArray value, PackedSequences packed) {
        if (ulysses != null) {
            return ulysses.forward(scope, query, key, value, packed, (sc, q, k, v) -> local(sc, q, k, v, packed));
        }
        return local(scope, query, key, value, packed);
    }

    /** This rank's tokens: the ring's or all-gather's share, or a whole sequence (no CP, or a2a's gathered one). */
    private NDArray local(AutogradScope scope, NDArray query, NDArray key, NDArray value, PackedSequences packed) {
        return contextParallel != null ? contextParallel.forward(scope, query, key, value, packed)
                : wholeSequence(scope, query, key, value, packed);
    }

    /** Causal attention over a whole sequence on this rank, block-diagonal for packed sequences. */
    private NDArray wholeSequence(AutogradScope scope, NDArray query, NDArray key, NDArray value, PackedSequences packed) {
        long s = query.getShape().get(0);
        long b = query.getShape().get(1);
        long np = query.getShape().get(2);
        long d = query.getShape().get(3);
        long ng = key.getShape().get(2);
        try (Frame block = scope.openFrame()) {
            NDArray v;
            NDArray probs;
            // the [b·np, s, s] float32 scores and the repeated keys and values that backward does not
            // need (softmax keeps its output) die when this frame closes
            try (Frame scoring = scope.openFrame()) {
                NDArray q0 = scoring.input(query);
                NDArray k0 = scoring.input(key);
                NDArray v0 = scoring.input(value);
                // each key/value group serves np/ng consecutive query heads
                NDArray keys = ng != np ? k0.repeat(2, np / ng) : k0;
                NDArray values = ng != np ? v0.repeat(2, np / ng) : v0;
                NDArray q = q0.transpose(1, 2, 0, 3).reshape(b * np, s, d);
                NDArray k = keys.transpose(1, 2, 3, 0).reshape(b * np, d, s);
                v = scoring.keep(values.transpose(1, 2, 0, 3).reshape(b * np, s, d));
                NDArray rawScores = q.matMul(k);
                NDArray scores32 = Cast.apply(scope, rawScores, DataType.FLOAT32);
                NDArray scores = Tensors.scale(scores32, 1.0 / Math.sqrt(d), scope.manager());
                NDArray mask = packed == null ? causalMask(scope, s) : PackedAttentionMask.whole(scope.manager(), packed);
                NDArray masked = scores.reshape(b, np, s, s).add(mask).reshape(b * np, s, s);
                probs = scoring.keep(Cast.apply(scope, masked.softmax(-1), DataTypes.of(query)));
            }
            NDArray kept = Dropout.apply(scope, probs, ctx.config().attentionDropout(), ctx.attentionDropout());
            NDArray merged = kept.matMul(v);
            NDArray sequenceFirst = merged.reshape(b, np, s, d).transpose(2, 0, 1, 3);
            return block.keep(sequenceFirst.reshape(s, b, np * d));
        }
    }

    /**
     * Additive mask [1, s, s]: 0 where a query may attend (key position ≤ query position), -10000
     * elsewhere; owned by the scope, its temporaries closed.
     */
    static NDArray causalMask(AutogradScope scope, long s) {
        return scope.frame(() -> {
            NDManager manager = scope.manager();
            NDArray pos = manager.arange(0, (int) s, 1, DataType.INT64);
            NDArray future32 = pos.reshape(1, s).gt(pos.reshape(s, 1)).toType(DataType.FLOAT32, false);
            return future32.mul(Tensors.scalar(-10000.0, future32, manager)).reshape(new Shape(1, s, s));
        });
    }
}
