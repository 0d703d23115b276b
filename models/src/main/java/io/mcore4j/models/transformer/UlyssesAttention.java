package io.mcore4j.models.transformer;

import ai.djl.ndarray.NDArray;
import io.mcore4j.contextparallel.ContextParallelMappings;
import io.mcore4j.contextparallel.ContextParallelSplit;
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
 * <p>The query heads of a tensor-parallel rank must be divisible by {@code CP}. Key/value groups
 * whose number is not are repeated (each group serving its consecutive query heads, as GQA does)
 * to the fewest groups that {@code CP} divides, so that every rank receives the groups its heads use.
 *
 * <p>Packed sequences split per column (the whole sequence comes back in position order) are attended
 * by the serial attention with their mask; those split per sequence
 * ({@link ContextParallelSplit#splitsPerSequence}) are refused: the exchange reorders the tokens of the
 * whole-column split only.
 */
final class UlyssesAttention {
    private final Communicator cp;
    private final ContextParallelSplit split;
    private final int groupRepeat;

    /**
     * @param ctx the model context; its {@code cp} group has more than one rank
     * @throws IllegalArgumentException if this tensor-parallel rank's query heads are not divisible by CP
     */
    UlyssesAttention(ModelContext ctx) {
        this.cp = ctx.groups().cp();
        this.split = ContextParallelSplit.of(cp);
        int tp = ctx.groups().tp().size();
        int heads = ctx.config().numAttentionHeads() / tp;
        int groups = Math.max(1, ctx.config().numQueryGroups() / tp);
        int n = cp.size();
        if (heads % n != 0) {
            throw new IllegalArgumentException("--cp-comm-type a2a scatters the attention heads over the context-parallel group:"
                    + " " + heads + " heads per tensor-parallel rank are not divisible by context parallel size " + n);
        }
        int repeat = n / gcd(groups, n);
        if (heads % (groups * repeat) != 0) {
            throw new IllegalArgumentException("--cp-comm-type a2a: " + groups + " key/value groups per tensor-parallel rank"
                    + " cannot be spread over context parallel size " + n + " with " + heads + " heads");
        }
        this.groupRepeat = repeat;
    }

    /**
     * @param scope the pass's scope
     * @param query this rank's queries [s/CP, b, np, d]
     * @param key this rank's keys [s/CP, b, ng, d]
     * @param value this rank's values [s/CP, b, ng, d]
     * @param packed the whole micro-batch's packed sequences (which {@code serial} must respect), or null
     * @param serial causal attention over a whole sequence (it sees {@code np/CP} heads)
     * @return context [s/CP, b, np·d] for this rank's tokens
     * @throws IllegalArgumentException if the packed sequences are split per sequence
     */
    NDArray forward(AutogradScope scope, NDArray query, NDArray key, NDArray value, PackedSequences packed,
                    CoreAttention serial) {
        if (split.splitsPerSequence(packed)) {
            throw new IllegalArgumentException("--cp-comm-type a2a gathers whole columns in position order; packed sequences"
                    + " whose lengths are multiples of 2 x context parallel size " + cp.size() + " are split per sequence:"
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
            NDArray q = ContextParallelMappings.scatterHeadsGatherSequence(scope, cp, f.input(query));
            NDArray context = serial.forward(scope, q, ContextParallelMappings.scatterHeadsGatherSequence(scope, cp, k),
                    ContextParallelMappings.scatterHeadsGatherSequence(scope, cp, v));
            NDArray heads = context.reshape(context.getShape().get(0), b, np / cp.size(), d);
            return f.keep(ContextParallelMappings.scatterSequenceGatherHeads(scope, cp, heads).reshape(l, b, np * d));
        }
    }

    private static int gcd(int a, int b) {
        return b == 0 ? a : gcd(b, a % b);
    }
}
