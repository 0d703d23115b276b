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
 *
 * <p>In a layer with a sliding window ({@link io.mcore4j.models.TransformerConfig#windowSize(int)}) the mask
 * also hides the keys more than the window behind each query (for packed sequences the block-diagonal mask
 * is cut to the window); under context parallelism only {@code a2a}, which attends whole sequences, takes a
 * window (and {@code a2a+p2p} whose ring has one rank).
 */
public final class DotProductAttention implements CoreAttention {
    private final ModelContext ctx;
    private final ContextParallelAttention contextParallel;
    private final UlyssesAttention ulysses;
    /** Tokens before a query that it attends, or -1 for all of them. */
    private final int window;

    /**
     * Causal attention over every earlier position.
     *
     * @param ctx the model context (dropout probability and generator, context-parallel groups)
     * @throws IllegalArgumentException if {@code --cp-comm-type a2a} or {@code a2a+p2p} cannot scatter this
     *     rank's heads, or {@code a2a+p2p} finds no hierarchical context-parallel groups
     */
    public DotProductAttention(ModelContext ctx) {
        this(ctx, -1);
    }

    /**
     * The attention of one layer: limited to the config's sliding window where the layer has one.
     *
     * @param ctx the model context
     * @param layerNumber the layer's global index
     * @return the attention
     * @throws IllegalArgumentException as {@link #DotProductAttention(ModelContext)}, and for a window under
     *     context parallelism that runs a ring ({@code p2p}, {@code allgather}, {@code a2a+p2p} with a ring)
     */
    public static DotProductAttention forLayer(ModelContext ctx, int layerNumber) {
        return new DotProductAttention(ctx, ctx.config().windowSize(layerNumber));
    }

    private DotProductAttention(ModelContext ctx, int window) {
        checkWindowUnderContextParallelism(ctx, window);
        this.ctx = ctx;
        this.window = window;
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

    /** Causal attention over a whole sequence on this rank, block-diagonal for packed sequences, cut to the window. */
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
                NDArray mask = packed == null ? causalMask(scope, s, window)
                        : PackedAttentionMask.whole(scope.manager(), packed, window);
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
     * Additive mask [1, s, s]: 0 where a query may attend (key position ≤ query position, and with a
     * window at most {@code window} positions before it), -10000 elsewhere; owned by the scope, its
     * temporaries closed.
     *
     * @param window tokens before a query that it attends, or -1 for all
     */
    static NDArray causalMask(AutogradScope scope, long s, int window) {
        return scope.frame(() -> {
            NDManager manager = scope.manager();
            NDArray pos = manager.arange(0, (int) s, 1, DataType.INT64);
            NDArray hidden = pos.reshape(1, s).gt(pos.reshape(s, 1));
            if (window >= 0) {
                NDArray behind = pos.reshape(s, 1).sub(pos.reshape(1, s));
                hidden = hidden.logicalOr(behind.gt(Tensors.scalar(window, behind, manager)));
            }
            NDArray hidden32 = hidden.toType(DataType.FLOAT32, false);
            return hidden32.mul(Tensors.scalar(-10000.0, hidden32, manager)).reshape(new Shape(1, s, s));
        });
    }

    /**
     * Refuses a sliding window where the attention sees only part of the sequence: the context-parallel
     * exchanges of {@code p2p}, {@code allgather} and {@code a2a+p2p} with a ring of more than one rank (their
     * masks are causal between whole chunks); {@code a2a}, and {@code a2a+p2p} whose ring has one rank, attend
     * whole sequences and take it.
     */
    static void checkWindowUnderContextParallelism(ModelContext ctx, int window) {
        int cp = ctx.groups().cp().size();
        CpCommType comm = ctx.config().cpCommType();
        boolean ring = switch (comm) {
            case P2P, ALL_GATHER -> true;
            case A2A -> false;
            case A2A_P2P -> ctx.config().hierarchicalContextParallelSizes().get(1) > 1;
        };
        if (window >= 0 && cp > 1 && ring) {
            throw new IllegalArgumentException("sliding-window attention (window size " + window + ") under context"
                    + " parallelism needs --cp-comm-type a2a (or a2a+p2p with a ring of one rank), which attends whole"
                    + " sequences; context parallel size " + cp + " with --cp-comm-type " + comm.flag()
                    + (comm == CpCommType.A2A_P2P ? " over a ring of " + ctx.config().hierarchicalContextParallelSizes().get(1)
                            + " ranks" : "") + " is not supported");
        }
    }
}
