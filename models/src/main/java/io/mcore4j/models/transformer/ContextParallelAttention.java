package io.mcore4j.models.transformer;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDArrays;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.PackedSequences;
import io.mcore4j.contextparallel.ContextParallelMappings;
import io.mcore4j.contextparallel.ContextParallelSplit;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.autograd.Cast;
import io.mcore4j.core.autograd.Frame;
import io.mcore4j.parallel.Communicator;

import java.util.ArrayList;
import java.util.List;

/**
 * Causal attention of this rank's queries over the whole sequence when the sequence is split over
 * a context-parallel group ({@link ContextParallelSplit}: this rank holds global chunks
 * {@code r} and {@code 2·CP−1−r} of {@code 2·CP}).
 *
 * <p>The keys and values of every rank reach this one as blocks, by the configured
 * {@link io.mcore4j.contextparallel.CpCommType}: one all-gather of the whole sequence ({@code allgather}), or {@code CP−1}
 * shifts around the ring ({@code p2p}); the exchanges are {@link ContextParallelMappings}, whose
 * backward returns the key and value gradients to their ranks. Each pair of a local query chunk and
 * a key chunk is attended separately by global chunk index: a key chunk after the query chunk is
 * skipped, the same chunk gets the causal mask, an earlier one none. The partial results of a
 * query chunk are merged by their log-sum-exp (online softmax), which gives the softmax over all
 * its visible keys. Everything is libtorch autograd except the exchanges. Scores, the log-sum-exp
 * and the merge are float32; the probabilities are cast to the activations' dtype before
 * multiplying the values, as in {@link DotProductAttention}. Attention dropout drops each block's
 * probabilities, which is dropout on the merged probabilities.
 *
 * <p>Under {@code a2a+p2p} this is the ring over the second hierarchical level, attending the tokens
 * that the all-to-all over the first level gathered ({@link UlyssesAttention}): they are that ring's
 * load-balanced chunks, so the ring is {@code p2p}'s over fewer ranks.
 */
final class ContextParallelAttention {
    private final ModelContext ctx;
    private final Communicator cp;
    private final ContextParallelSplit split;
    private final boolean allGather;
    /** The split the micro-batch was cut with (the whole context-parallel group's), for packed sequences' masks. */
    private final ContextParallelSplit dataSplit;
    /** How many consecutive ranks of {@link #dataSplit} a ring rank holds the tokens of: a2a+p2p's a2a size, else 1. */
    private final int gatheredRanks;

    /**
     * @param ctx the model context
     * @param cp the group the keys and values are exchanged over (more than one rank): the whole
     *     context-parallel group, or {@code a2a+p2p}'s ring level
     * @param allGather whether the exchange is one all-gather ({@code allgather}) rather than the ring
     */
    ContextParallelAttention(ModelContext ctx, Communicator cp, boolean allGather) {
        this.ctx = ctx;
        this.cp = cp;
        this.split = ContextParallelSplit.of(cp);
        this.allGather = allGather;
        this.dataSplit = ContextParallelSplit.of(ctx.groups().cp());
        this.gatheredRanks = dataSplit.size() / cp.size();
    }

    /**
     * @param scope the pass's scope
     * @param query this rank's queries [s/CP, b, np, d]
     * @param key this rank's keys [s/CP, b, ng, d]
     * @param value this rank's values [s/CP, b, ng, d]
     * @return context [s/CP, b, np·d] for this rank's queries
     * @throws IllegalArgumentException if {@code s/CP} is odd (the sequence cannot be split in 2·CP chunks)
     */
    NDArray forward(AutogradScope scope, NDArray query, NDArray key, NDArray value) {
        return forward(scope, query, key, value, null);
    }

    /**
     * @param scope the pass's scope
     * @param query this rank's queries [s/CP, b, np, d]
     * @param key this rank's keys [s/CP, b, ng, d]
     * @param value this rank's values [s/CP, b, ng, d]
     * @param packed the whole micro-batch's packed sequences, or null for one causal sequence per column
     * @return context [s/CP, b, np·d] for this rank's queries
     * @throws IllegalArgumentException if the sequence cannot be split in 2·CP chunks
     */
    NDArray forward(AutogradScope scope, NDArray query, NDArray key, NDArray value, PackedSequences packed) {
        split.sequenceLength(query.getShape().get(0));
        DataType dtype = DataTypes.of(query);
        List<List<NDArray[]>> parts = new ArrayList<>();
        // the exchanged keys and values, the query chunks and the views of them die with this frame;
        // the blocks' outputs and log-sum-exps move out to be merged
        try (Frame frame = scope.openFrame()) {
            if (packed != null) {
                parts.add(attendPackedBlocks(scope, frame.input(query), frame.input(key), frame.input(value), packed));
            } else {
                parts.addAll(attendBlocks(scope, frame.input(query), frame.input(key), frame.input(value)));
            }
            for (List<NDArray[]> chunk : parts) {
                for (NDArray[] p : chunk) {
                    frame.keep(p[0]);
                    frame.keep(p[1]);
                }
            }
        }
        if (packed != null) {
            return scope.frame(() -> merge(scope, parts.get(0), dtype));
        }
        return scope.frame(() -> NDArrays.concat(new NDList(merge(scope, parts.get(0), dtype),
                merge(scope, parts.get(1), dtype)), 0));
    }

    /** This rank's queries against every rank's visible keys and values: each block's {output, lse}. */
    private List<NDArray[]> attendPackedBlocks(AutogradScope scope, NDArray query, NDArray key, NDArray value,
                                               PackedSequences packed) {
        int n = cp.size();
        int rank = cp.rank();
        NDManager m = scope.manager();
        NDArray kv = NDArrays.concat(new NDList(key, value), -1);
        NDArray gathered = allGather ? ContextParallelMappings.allGatherSequence(scope, cp, kv) : null;
        long[][] queries = PackedAttentionMask.tokens(dataSplit, rank, gatheredRanks, packed);
        List<NDArray[]> parts = new ArrayList<>();
        NDArray block = kv;
        for (int step = 0; step < n; step++) {
            int source = Math.floorMod(rank - step, n);
            block = nextBlock(scope, kv, gathered, block, step, source);
            long[][] keys = PackedAttentionMask.tokens(dataSplit, source, gatheredRanks, packed);
            NDArray mask = PackedAttentionMask.of(m, packed, queries, keys, -1);
            if (mask != null) {
                parts.add(attend(scope, query, block, mask));
            }
        }
        return parts;
    }

    /**
     * The keys and values of {@code source} at ring step {@code step}: its chunk of the all-gathered
     * sequence, or the block the ring shifted to this rank (the one passed on is released).
     */
    private NDArray nextBlock(AutogradScope scope, NDArray kv, NDArray gathered, NDArray block, int step, int source) {
        if (gathered != null) {
            return Tensors.own(Tensors.chunk(gathered, 0, cp.size(), source), scope.manager());
        }
        if (step == 0) {
            return block;
        }
        NDArray next = ContextParallelMappings.ringShift(scope, cp, block);
        // the ring holds one block at a time: the one passed on is dead unless its shift's backward refers to it
        if (block != kv) {
            scope.release(block);
        }
        return next;
    }

    /** Every visible (query chunk, key chunk) block's {output, lse}, per local query chunk. */
    private List<List<NDArray[]>> attendBlocks(AutogradScope scope, NDArray query, NDArray key, NDArray value) {
        int n = cp.size();
        int rank = cp.rank();
        NDManager m = scope.manager();
        NDArray kv = NDArrays.concat(new NDList(key, value), -1);
        NDArray gathered = allGather ? ContextParallelMappings.allGatherSequence(scope, cp, kv) : null;
        long[] queryChunks = {rank, 2L * n - 1 - rank};
        NDArray[] queries = {Tensors.own(Tensors.chunk(query, 0, 2, 0), m), Tensors.own(Tensors.chunk(query, 0, 2, 1), m)};
        List<List<NDArray[]>> parts = List.of(new ArrayList<>(), new ArrayList<>());
        NDArray block = kv;
        for (int step = 0; step < n; step++) {
            int source = Math.floorMod(rank - step, n);
            block = nextBlock(scope, kv, gathered, block, step, source);
            long[] keyChunks = {source, 2L * n - 1 - source};
            for (int ki = 0; ki < 2; ki++) {
                NDArray keyValue = null;
                for (int qi = 0; qi < 2; qi++) {
                    if (keyChunks[ki] > queryChunks[qi]) {
                        continue;
                    }
                    if (keyValue == null) {
                        keyValue = Tensors.own(Tensors.chunk(block, 0, 2, ki), m);
                    }
                    parts.get(qi).add(attend(scope, queries[qi], keyValue,
                            keyChunks[ki] == queryChunks[qi] ? DotProductAttention.causalMask(scope, queries[qi].getShape().get(0), -1) : null));
                }
            }
        }
        return parts;
    }

    /**
     * One query chunk against one key/value chunk: float32 scores, their log-sum-exp per query,
     * and the unnormalised-by-others output {@code softmax(scores)·v} of this block.
     *
     * @param mask additive mask broadcast to {@code [b, np, c, ck]} (the diagonal chunk's causal one,
     *     packed sequences' block mask), or null for none
     * @return {output [c, b, np, d] in the query's dtype, lse [c, b, np, 1] float32}
     */
    private NDArray[] attend(AutogradScope scope, NDArray query, NDArray keyValue, NDArray mask) {
        // the block's scores, probabilities and repeated keys and values die with the frame (softmax
        // and the products keep what their backward needs)
        try (Frame frame = scope.openFrame()) {
            NDManager m = scope.manager();
            NDArray q0 = frame.input(query);
            NDArray kv = frame.input(keyValue);
            long c = q0.getShape().get(0);
            long b = q0.getShape().get(1);
            long np = q0.getShape().get(2);
            long d = q0.getShape().get(3);
            long ng = kv.getShape().get(2);
            long ck = kv.getShape().get(0);
            int last = kv.getShape().dimension() - 1;
            NDArray key = Tensors.narrow(kv, last, 0, d);
            NDArray value = Tensors.narrow(kv, last, d, kv.getShape().get(last));
            // each key/value group serves np/ng consecutive query heads
            NDArray keys = ng != np ? key.repeat(2, np / ng) : key;
            NDArray values = ng != np ? value.repeat(2, np / ng) : value;
            NDArray q = q0.transpose(1, 2, 0, 3).reshape(b * np, c, d);
            NDArray k = keys.transpose(1, 2, 3, 0).reshape(b * np, d, ck);
            NDArray v = values.transpose(1, 2, 0, 3).reshape(b * np, ck, d);
            NDArray scores32 = Cast.apply(scope, q.matMul(k), DataType.FLOAT32);
            NDArray scores = Tensors.scale(scores32, 1.0 / Math.sqrt(d), m);
            if (mask != null) {
                scores = scores.reshape(b, np, c, ck).add(mask).reshape(b * np, c, ck);
            }
            // the maximum only stabilises the exponent; its gradient would cancel, so it carries none
            NDArray max = Tensors.own(scores.max(new int[] {-1}, true).stopGradient(), m);
            NDArray lse = scores.sub(max).exp().sum(new int[] {-1}, true).log().add(max);
            NDArray probs = Cast.apply(scope, scores.sub(lse).exp(), DataTypes.of(q0));
            NDArray kept = Dropout.apply(scope, probs, ctx.config().attentionDropout(), ctx.attentionDropout());
            NDArray output = kept.matMul(v).reshape(b, np, c, d).transpose(2, 0, 1, 3);
            NDArray logSumExp = lse.reshape(b, np, c, 1).transpose(2, 0, 1, 3);
            return new NDArray[] {frame.keep(output), frame.keep(logSumExp)};
        }
    }

    /**
     * The softmax over all blocks from the blocks' own: {@code Σ exp(lse_i − lse)·out_i} with
     * {@code lse = log Σ exp(lse_i)}, in float32, cast to {@code dtype}.
     *
     * @return context [c, b, np·d]
     */
    private static NDArray merge(AutogradScope scope, List<NDArray[]> parts, DataType dtype) {
        NDManager m = scope.manager();
        NDArray first = parts.get(0)[0];
        long c = first.getShape().get(0);
        long b = first.getShape().get(1);
        long np = first.getShape().get(2);
        long d = first.getShape().get(3);
        if (parts.size() == 1) {
            return Tensors.own(first.reshape(c, b, np * d), m);
        }
        NDList lses = new NDList();
        for (NDArray[] p : parts) {
            lses.add(p[1]);
        }
        NDArray stacked = Tensors.own(NDArrays.stack(lses, 0), m);
        NDArray max = Tensors.own(stacked.max(new int[] {0}, true).stopGradient(), m);
        NDArray total = stacked.sub(max).exp().sum(new int[] {0}).log().add(max.squeeze(0));
        NDArray sum = null;
        for (NDArray[] p : parts) {
            NDArray weight = Tensors.own(p[1].sub(total), m).exp();
            // a float32 output casts to itself: the product must still land in this frame
            NDArray term = Tensors.own(Cast.apply(scope, p[0], DataType.FLOAT32).mul(weight), m);
            sum = sum == null ? term : sum.add(term);
        }
        return Cast.apply(scope, sum, dtype).reshape(c, b, np * d);
    }
}
