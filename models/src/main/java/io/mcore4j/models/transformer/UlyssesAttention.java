package io.mcore4j.models.transformer;

import ai.djl.ndarray.NDArray;
import io.mcore4j.contextparallel.ContextParallelMappings;
import io.mcore4j.contextparallel.ContextParallelSplit;
import io.mcore4j.contextparallel.CpCommType;
import io.mcore4j.core.PackedSequences;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.autograd.Frame;
import io.mcore4j.parallel.Communicator;

/**
 * {@code --cp-comm-type a2a} (DeepSpeed-Ulysses, as in Megatron-Core): an all-to-all gives each
 * context-parallel rank the whole sequence, in position order, for {@code np/CP} of its heads; a
 * serial causal attention (the composed or the fused one, whichever the backend is) attends it, and
 * a second all-to-all returns the outputs to the ranks that hold their tokens
 * ({@link ContextParallelMappings#scatterHeadsGatherSequence}; backward is the transposed exchanges).
 *
 * <p>Under {@code a2a+p2p} the same exchange runs over the first hierarchical level only (a group of
 * {@code A} consecutive context-parallel ranks): each rank then holds that group's tokens, which are
 * the ring's load-balanced chunks ({@link CpCommType#A2A_P2P}), for
 * {@code np/A} heads, and the "serial" attention is the ring over the second level.
 *
 * <p>The query heads of a tensor-parallel rank must be divisible by the group's size {@code n}. Key/value
 * groups whose number is not are repeated (each group serving its consecutive query heads, as GQA does)
 * to the fewest groups that {@code n} divides, so that every rank receives the groups its heads use.
 *
 * <p>Packed sequences split per column (the gathered tokens come back in position order) are attended
 * by the serial attention with their mask; those split per sequence
 * ({@link ContextParallelSplit#splitsPerSequence}) are refused: the exchange reorders the tokens of the
 * whole-column split only.
 */
final class UlyssesAttention {
    private final Communicator group;
    /** The split the micro-batch was cut with: the whole context-parallel group's. */
    private final ContextParallelSplit split;
    private final int groupRepeat;
    private final String comm;

    /**
     * @param ctx the model context
     * @return the all-to-all stage of the model's comm type ({@link CpCommGroups#allToAll}), or null without one
     * @throws IllegalArgumentException if this tensor-parallel rank's query heads are not divisible by the group's size
     */
    static UlyssesAttention of(ModelContext ctx) {
        Communicator group = CpCommGroups.allToAll(ctx);
        return group == null ? null : new UlyssesAttention(ctx, group);
    }

    private UlyssesAttention(ModelContext ctx, Communicator group) {
        this.group = group;
        this.split = ContextParallelSplit.of(ctx.groups().cp());
        int tp = ctx.groups().tp().size();
        int heads = ctx.config().numAttentionHeads() / tp;
        int groups = Math.max(1, ctx.config().numQueryGroups() / tp);
        int n = group.size();
        String over = ctx.config().cpCommType() == CpCommType.A2A ? "context parallel size " + n
                : "the a2a group's size " + n + " (the first of --hierarchical-context-parallel-sizes)";
        this.comm = "--cp-comm-type " + ctx.config().cpCommType().flag();
        if (heads % n != 0) {
            throw new IllegalArgumentException(comm + " scatters the attention heads over the context-parallel group:"
                    + " " + heads + " heads per tensor-parallel rank are not divisible by " + over);
        }
        int repeat = n / gcd(groups, n);
        if (heads % (groups * repeat) != 0) {
            throw new IllegalArgumentException(comm + ": " + groups + " key/value groups per tensor-parallel rank"
                    + " cannot be spread over " + over + " with " + heads + " heads");
        }
        this.groupRepeat = repeat;
    }

    /**
     * @param scope the pass's scope
     * @param query this rank's queries [s/CP, b, np, d]
     * @param key this rank's keys [s/CP, b, ng, d]
     * @param value this rank's values [s/CP, b, ng, d]
     * @param packed the whole micro-batch's packed sequences (which {@code serial} must respect), or null
     * @param serial causal attention over the group's gathered tokens in position order (it sees
     *     {@code np/n} heads): the whole sequence under {@code a2a}, the ring's share under {@code a2a+p2p}
     * @return context [s/CP, b, np·d] for this rank's tokens
     * @throws IllegalArgumentException if the packed sequences are split per sequence
     */
    NDArray forward(AutogradScope scope, NDArray query, NDArray key, NDArray value, PackedSequences packed,
                    CoreAttention serial) {
        if (split.splitsPerSequence(packed)) {
            throw new IllegalArgumentException(comm + " gathers whole columns in position order; packed sequences"
                    + " whose lengths are multiples of 2 x context parallel size " + split.size() + " are split per sequence:"
                    + " use --cp-comm-type p2p or allgather with --attention-backend unfused");
        }
        long l = query.getShape().get(0);
        long b = query.getShape().get(1);
        long np = query.getShape().get(2);
        long d = query.getShape().get(3);
        split.sequenceLength(l);
        // the exchanged and repeated tensors die with this frame; the exchanges' backward keeps nothing
        try (Frame f = scope.openFrame()) {
            NDArray k = f.input(key);
            NDArray v = f.input(value);
            if (groupRepeat > 1) {
                k = k.repeat(2, groupRepeat);
                v = v.repeat(2, groupRepeat);
            }
            NDArray q = ContextParallelMappings.scatterHeadsGatherSequence(scope, group, f.input(query));
            NDArray context = serial.forward(scope, q, ContextParallelMappings.scatterHeadsGatherSequence(scope, group, k),
                    ContextParallelMappings.scatterHeadsGatherSequence(scope, group, v));
            NDArray heads = context.reshape(context.getShape().get(0), b, np / group.size(), d);
            return f.keep(ContextParallelMappings.scatterSequenceGatherHeads(scope, group, heads).reshape(l, b, np * d));
        }
    }

    private static int gcd(int a, int b) {
        return b == 0 ? a : gcd(b, a % b);
    }
}
