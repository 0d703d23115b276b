package io.mcore4j.contextparallel;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDArrays;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.autograd.Function;
import io.mcore4j.core.autograd.FunctionContext;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.PendingCollective;

/**
 * Causal attention of this rank's queries over the whole sequence split by {@link ContextParallelSplit},
 * on libtorch's fused attention kernels: ring attention ({@code --cp-comm-type p2p}) with each
 * (query chunk, key/value chunk) pair one fused kernel call that returns its log-sum-exp
 * ({@link AttentionBlockKernel}).
 *
 * <p>Forward: the keys and values travel around the ring in {@code CP} steps; the exchange of the
 * next block is started before the current block is attended, so a backend that can overlap them
 * (NCCL's second stream) does. Each step is one kernel call, as the load-balanced split allows
 * ({@link Pair}): the local step one causal call over both local chunks, a lower rank's block both
 * query chunks against its first key chunk, a higher rank's block the second query chunk against
 * both. The partial outputs of a query chunk are merged in float32 by their log-sum-exp (online
 * softmax), cast once to the queries' dtype.
 * Backward: the keys and values go around the ring again; each visible block's kernel backward
 * runs with the merged output and log-sum-exp, so its probabilities are the global softmax's. The
 * query gradient is accumulated locally in float32; the key and value gradients accumulate in a
 * float32 block that travels around the ring with its keys and values and arrives home after the
 * last step. Only this rank's keys and values, its merged output and log-sum-exp are kept for
 * backward: no block's probabilities are ever stored.
 *
 * <p>Tensors are heads-first: queries {@code [b, np, s/CP, d]}, keys and values
 * {@code [b, ng, s/CP, d]} ({@code ng} divides {@code np}; grouped keys and values travel
 * unrepeated). Communicates over {@code cp} only: every member applies it in the same order. No
 * attention dropout.
 */
public final class FusedRingAttention {
    private final Communicator cp;
    private final AttentionBlockKernel kernel;
    private final Ring ring;

    /**
     * @param cp the context-parallel communicator (a group of one attends the whole causal sequence)
     * @param owner long-lived manager (a model's parameters) that keeps the kernel's small constants
     * @throws IllegalStateException if the kernel modules cannot be loaded
     */
    public FusedRingAttention(Communicator cp, NDManager owner) {
        this.cp = cp;
        this.kernel = new AttentionBlockKernel(owner);
        this.ring = new Ring();
    }

    /**
     * @param scope the pass's scope
     * @param query this rank's queries {@code [b, np, s/CP, d]}
     * @param key this rank's keys {@code [b, ng, s/CP, d]}
     * @param value this rank's values {@code [b, ng, s/CP, d]}
     * @return the attention output for this rank's queries {@code [b, np, s/CP, d]}, in the queries' dtype
     * @throws IllegalArgumentException if {@code s/CP} is odd or the shapes disagree
     */
    public NDArray forward(AutogradScope scope, NDArray query, NDArray key, NDArray value) {
        Shape q = query.getShape();
        Shape k = key.getShape();
        if (q.dimension() != 4 || !k.equals(value.getShape()) || k.dimension() != 4 || q.get(0) != k.get(0)
                || q.get(2) != k.get(2) || q.get(3) != k.get(3) || q.get(1) % k.get(1) != 0) {
            throw new IllegalArgumentException("ring attention takes queries [b, np, s, d] and keys and values [b, ng, s, d]"
                    + " with ng dividing np; got " + q + ", " + k + ", " + value.getShape());
        }
        ContextParallelSplit.of(cp).sequenceLength(q.get(2));
        return scope.apply1(ring, query, key, value);
    }

    /**
     * The one kernel call of a ring step. Rank {@code r} holds chunks {@code r} and {@code 2N−1−r};
     * at step {@code t} it holds the keys and values of rank {@code src = r − t (mod N)}. Step 0 is
     * one causal call over the local chunks (in local order the causal mask is exactly the chunks'
     * visibility); a source below {@code r} is seen by both query chunks and only with its first
     * key chunk; a source above {@code r} only by the second query chunk, with both key chunks.
     *
     * @param allQueries the call takes both query chunks (else only the second)
     * @param allKeys the call takes both key chunks (else only the first)
     * @param causal the call is causal (step 0)
     */
    private record Pair(boolean allQueries, boolean allKeys, boolean causal) {
        static Pair of(int rank, int size, int step) {
            int source = Math.floorMod(rank - step, size);
            if (source == rank) {
                return new Pair(true, true, true);
            }
            return source < rank ? new Pair(true, false, false) : new Pair(false, true, false);
        }
    }

    /**
     * Forward is the ring above; backward the ring again with the kernels' backward. Saved: the
     * inputs, the merged output and the merged log-sum-exp.
     */
    private final class Ring implements Function {
        @Override
        public NDArray[] forward(FunctionContext ctx, NDArray... inputs) {
            NDManager m = ctx.manager();
            NDArray query = inputs[0];
            int n = cp.size();
            int rank = cp.rank();
            NDArray[] outputs = new NDArray[2];
            NDArray[] lses = new NDArray[2];
            NDArray output;
            NDArray lse;
            try (NDManager work = m.newSubManager()) {
                NDArray block = keyValueBlock(inputs[1], inputs[2], work);
                for (int s = 0; s < n; s++) {
                    Pair pair = Pair.of(rank, n, s);
                    PendingCollective next = s + 1 < n ? startShift(block, work) : null;
                    try (NDManager views = work.newSubManager()) {
                        AttentionBlockKernel.Block b = kernel.forward(pair.allQueries() ? query : half(query, 2, 1, views),
                                keys(block, 0, pair, views), keys(block, 1, pair, views), pair.causal(), work);
                        if (pair.allQueries()) {
                            merge(outputs, lses, 0, half(b.output(), 2, 0, work), half(b.logSumExp(), 2, 0, work), work);
                            merge(outputs, lses, 1, half(b.output(), 2, 1, work), half(b.logSumExp(), 2, 1, work), work);
                            // the halves (views) keep what is still needed of the block's storage
                            b.output().close();
                            b.logSumExp().close();
                        } else {
                            merge(outputs, lses, 1, b.output(), b.logSumExp(), work);
                        }
                    }
                    block = advance(block, next, work);
                }
                output = Tensors.own(DataTypes.toType(NDArrays.concat(new NDList(outputs[0], outputs[1]), 2),
                        DataTypes.of(query), false), m);
                lse = Tensors.own(NDArrays.concat(new NDList(lses[0], lses[1]), 2), m);
            }
            ctx.saveForBackward(inputs[0], inputs[1], inputs[2], output, lse);
            return new NDArray[] {output};
        }

        @Override
        public NDArray[] backward(FunctionContext ctx, NDArray... grads) {
            NDManager m = ctx.manager();
            NDArray query = ctx.saved(0);
            NDArray key = ctx.saved(1);
            NDArray value = ctx.saved(2);
            NDArray out = ctx.saved(3);
            NDArray lse = ctx.saved(4);
            int n = cp.size();
            int rank = cp.rank();
            NDArray[] dq = new NDArray[2];
            NDArray[] result = new NDArray[3];
            try (NDManager work = m.newSubManager()) {
                NDArray gradOutput = DataTypes.toType(grads[0], DataTypes.of(query), false);
                if (gradOutput != grads[0]) {
                    Tensors.own(gradOutput, work);
                }
                NDArray block = keyValueBlock(key, value, work);
                PendingCollective travelling = null;
                NDArray sent = null;
                for (int s = 0; s < n; s++) {
                    Pair pair = Pair.of(rank, n, s);
                    PendingCollective next = s + 1 < n ? startShift(block, work) : null;
                    try (NDManager views = work.newSubManager()) {
                        NDArray[] g = pair.allQueries()
                                ? kernel.backward(gradOutput, query, keys(block, 0, pair, views), keys(block, 1, pair, views),
                                        out, lse, pair.causal(), views)
                                : kernel.backward(half(gradOutput, 2, 1, views), half(query, 2, 1, views), keys(block, 0, pair, views),
                                        keys(block, 1, pair, views), half(out, 2, 1, views), half(lse, 2, 1, views), false, views);
                        if (pair.allQueries()) {
                            dq[0] = accumulate(dq[0], half(g[0], 2, 0, views), work);
                            dq[1] = accumulate(dq[1], half(g[0], 2, 1, views), work);
                        } else {
                            dq[1] = accumulate(dq[1], g[0], work);
                        }
                        // this step's key and value gradients, [2, b, ng, c or 2c, d]
                        NDArray local = Tensors.own(NDArrays.stack(new NDList(g[1], g[2]), 0), views);
                        NDArray arrived = null;
                        if (travelling != null) {
                            arrived = Tensors.own(travelling.await(), views);
                            sent.close(); // the exchange that brought `arrived` has also read it
                        }
                        sent = Tensors.own(pair.allKeys() ? (arrived == null ? local : arrived.add(local))
                                : NDArrays.concat(new NDList(half(arrived, 3, 0, views).add(local), half(arrived, 3, 1, views)), 3), work);
                        travelling = startShift(sent, work);
                    }
                    block = advance(block, next, work);
                }
                // after CP shifts the gradient block of this rank's own keys and values is back
                NDArray home = Tensors.own(travelling.await(), work);
                if (ctx.needsInputGrad(0)) {
                    result[0] = Tensors.own(DataTypes.toType(NDArrays.concat(new NDList(dq[0], dq[1]), 2),
                            DataTypes.of(query), false), m);
                }
                if (ctx.needsInputGrad(1)) {
                    result[1] = Tensors.own(DataTypes.toType(part(home, 0, work), DataTypes.of(key), false), m);
                }
                if (ctx.needsInputGrad(2)) {
                    result[2] = Tensors.own(DataTypes.toType(part(home, 1, work), DataTypes.of(value), false), m);
                }
            }
            return result;
        }

        @Override
        public String name() {
            return "fused-ring-attention-context-parallel";
        }
    }

    /** Half {@code index} of {@code x} along {@code dim}, a view owned by {@code owner}. */
    private static NDArray half(NDArray x, int dim, int index, NDManager owner) {
        return Tensors.own(Tensors.chunk(x, dim, 2, index), owner);
    }

    /** The keys ({@code entry} 0) or values (1) of a block that {@code pair}'s call takes, a view owned by {@code owner}. */
    private static NDArray keys(NDArray block, int entry, Pair pair, NDManager owner) {
        NDArray all = part(block, entry, owner);
        return pair.allKeys() ? all : half(all, 2, 0, owner);
    }

    /** Entry {@code index} of a block's dim 0, a view owned by {@code owner}. */
    private static NDArray part(NDArray block, int index, NDManager owner) {
        return Tensors.own(block.get(index), owner);
    }

    /**
     * The block the ring passed to this rank, once it has arrived; the one passed on is closed then
     * (its exchange has read it). The last step keeps its block: it goes with {@code work}.
     */
    private static NDArray advance(NDArray block, PendingCollective next, NDManager work) {
        if (next == null) {
            return block;
        }
        NDArray arrived = Tensors.own(next.await(), work);
        if (arrived != block) {
            block.close();
        }
        return arrived;
    }

    /** This rank's keys and values as one contiguous block {@code [2, b, ng, s/CP, d]}, both chunks in local order. */
    private static NDArray keyValueBlock(NDArray key, NDArray value, NDManager owner) {
        return Tensors.own(NDArrays.stack(new NDList(key, value), 0), owner);
    }

    /** Starts passing {@code block} to the next rank of the ring and receiving the previous rank's. */
    private PendingCollective startShift(NDArray block, NDManager owner) {
        int n = cp.size();
        if (n == 1) {
            return () -> block;
        }
        long rows = block.getShape().get(0);
        long[] send = new long[n];
        long[] recv = new long[n];
        send[Math.floorMod(cp.rank() + 1, n)] = rows;
        recv[Math.floorMod(cp.rank() - 1, n)] = rows;
        return cp.startAllToAll(block, send, recv, owner);
    }

    /**
     * Folds one block into the query chunk's running output and log-sum-exp, in float32:
     * {@code lse = log(exp(lse_a) + exp(lse_b))}, {@code out = exp(lse_a − lse)·out_a + exp(lse_b − lse)·out_b}.
     * Every query row sees its own key in the diagonal block, so no log-sum-exp is −∞.
     */
    private static void merge(NDArray[] outputs, NDArray[] lses, int qi, NDArray blockOutput, NDArray blockLse, NDManager owner) {
        if (outputs[qi] == null) {
            outputs[qi] = blockOutput;
            lses[qi] = blockLse;
            return;
        }
        try (NDManager temp = owner.newSubManager()) {
            NDArray a = lses[qi];
            NDArray max = Tensors.own(a.maximum(blockLse), temp);
            NDArray total = Tensors.own(max.add(Tensors.own(a.sub(max), temp).exp().add(Tensors.own(blockLse.sub(max), temp).exp()).log()), temp);
            NDArray wa = Tensors.own(a.sub(total).exp().expandDims(-1), temp);
            NDArray wb = Tensors.own(blockLse.sub(total).exp().expandDims(-1), temp);
            NDArray merged = Tensors.own(Tensors.own(outputs[qi].mul(wa), temp).add(Tensors.own(blockOutput.mul(wb), temp)), owner);
            total.attach(owner);
            outputs[qi].close();
            blockOutput.close();
            a.close();
            blockLse.close();
            outputs[qi] = merged;
            lses[qi] = total;
        }
    }

    /**
     * {@code sum + term} (float32) owned by {@code owner}, closing both operands; {@code term}
     * itself, moved to {@code owner}, when there is no sum yet.
     */
    private static NDArray accumulate(NDArray sum, NDArray term, NDManager owner) {
        if (sum == null) {
            return Tensors.own(term, owner);
        }
        NDArray next = Tensors.own(sum.add(term), owner);
        sum.close();
        term.close();
        return next;
    }
}
