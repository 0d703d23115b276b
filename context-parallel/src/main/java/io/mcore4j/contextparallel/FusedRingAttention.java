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
 * (a second stream) does. A key chunk after the query chunk is skipped, the same chunk is causal,
 * an earlier one unmasked, as in the load-balanced split. The partial outputs of a query chunk are
 * merged in float32 by their log-sum-exp (online softmax), cast once to the queries' dtype.
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

    /** The chunks a step's block holds and which of the local query chunks attend them. */
    private record Step(long[] queryChunks, long[] keyChunks) {
        static Step of(int rank, int size, int step) {
            int source = Math.floorMod(rank - step, size);
            return new Step(new long[] {rank, 2L * size - 1 - rank}, new long[] {source, 2L * size - 1 - source});
        }

        boolean visible(int qi, int ki) {
            return keyChunks[ki] <= queryChunks[qi];
        }

        boolean diagonal(int qi, int ki) {
            return keyChunks[ki] == queryChunks[qi];
        }
    }

    /**
     * Forward is the ring above; backward the ring again with the kernels' backward. Saved: the
     * inputs, the merged output and each query chunk's merged log-sum-exp.
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
            try (NDManager work = m.newSubManager()) {
                NDArray[] queries = halves(query, work);
                NDArray block = keyValueBlock(inputs[1], inputs[2], work);
                for (int s = 0; s < n; s++) {
                    Step step = Step.of(rank, n, s);
                    PendingCollective next = s + 1 < n ? startShift(block, work) : null;
                    try (NDManager views = work.newSubManager()) {
                        for (int ki = 0; ki < 2; ki++) {
                            for (int qi = 0; qi < 2; qi++) {
                                if (step.visible(qi, ki)) {
                                    AttentionBlockKernel.Block b = kernel.forward(queries[qi], part(block, 2 * ki, views),
                                            part(block, 2 * ki + 1, views), step.diagonal(qi, ki), work);
                                    merge(outputs, lses, qi, b, work);
                                }
                            }
                        }
                    }
                    block = advance(block, next, work);
                }
                output = Tensors.own(DataTypes.toType(NDArrays.concat(new NDList(outputs[0], outputs[1]), 2),
                        DataTypes.of(query), false), m);
                Tensors.own(lses[0], m);
                Tensors.own(lses[1], m);
            }
            ctx.saveForBackward(inputs[0], inputs[1], inputs[2], output, lses[0], lses[1]);
            return new NDArray[] {output};
        }

        @Override
        public NDArray[] backward(FunctionContext ctx, NDArray... grads) {
            NDManager m = ctx.manager();
            NDArray query = ctx.saved(0);
            NDArray key = ctx.saved(1);
            NDArray value = ctx.saved(2);
            NDArray[] lses = {ctx.saved(4), ctx.saved(5)};
            int n = cp.size();
            int rank = cp.rank();
            Shape k = key.getShape();
            Shape chunk = new Shape(k.get(0), k.get(1), k.get(2) / 2, k.get(3));
            NDArray[] dq = new NDArray[2];
            NDArray[] result = new NDArray[3];
            try (NDManager work = m.newSubManager()) {
                NDArray gradOutput = DataTypes.toType(grads[0], DataTypes.of(query), false);
                if (gradOutput != grads[0]) {
                    Tensors.own(gradOutput, work);
                }
                NDArray[] queries = halves(query, work);
                NDArray[] douts = halves(gradOutput, work);
                NDArray[] outs = halves(ctx.saved(3), work);
                NDArray block = keyValueBlock(key, value, work);
                PendingCollective travelling = null;
                for (int s = 0; s < n; s++) {
                    Step step = Step.of(rank, n, s);
                    PendingCollective next = s + 1 < n ? startShift(block, work) : null;
                    // this block's key and value gradients from this rank's queries: {dk0, dv0, dk1, dv1}
                    NDArray[] local = new NDArray[4];
                    try (NDManager views = work.newSubManager()) {
                        for (int ki = 0; ki < 2; ki++) {
                            for (int qi = 0; qi < 2; qi++) {
                                if (step.visible(qi, ki)) {
                                    NDArray[] g = kernel.backward(douts[qi], queries[qi], part(block, 2 * ki, views),
                                            part(block, 2 * ki + 1, views), outs[qi], lses[qi], step.diagonal(qi, ki), views);
                                    dq[qi] = accumulate(dq[qi], g[0], work);
                                    local[2 * ki] = accumulate(local[2 * ki], g[1], views);
                                    local[2 * ki + 1] = accumulate(local[2 * ki + 1], g[2], views);
                                }
                            }
                        }
                        for (int i = 0; i < 4; i++) {
                            if (local[i] == null) {
                                local[i] = DataTypes.zeros(views, chunk, DataType.FLOAT32, query.getDevice());
                            }
                        }
                        NDArray gradBlock = Tensors.own(NDArrays.stack(new NDList(local), 0), work);
                        if (travelling != null) {
                            // the gradients this block gathered on the ranks it visited before this one
                            NDArray arrived = travelling.await();
                            NDArray sum = Tensors.own(gradBlock.add(arrived), work);
                            gradBlock.close();
                            arrived.close();
                            gradBlock = sum;
                        }
                        travelling = startShift(gradBlock, work);
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
                    result[1] = Tensors.own(DataTypes.toType(NDArrays.concat(new NDList(part(home, 0, work), part(home, 2, work)), 2),
                            DataTypes.of(key), false), m);
                }
                if (ctx.needsInputGrad(2)) {
                    result[2] = Tensors.own(DataTypes.toType(NDArrays.concat(new NDList(part(home, 1, work), part(home, 3, work)), 2),
                            DataTypes.of(value), false), m);
                }
            }
            return result;
        }

        @Override
        public String name() {
            return "fused-ring-attention-context-parallel";
        }
    }

    /** The two local sequence chunks of a heads-first tensor, as views owned by {@code owner}. */
    private static NDArray[] halves(NDArray x, NDManager owner) {
        return new NDArray[] {Tensors.own(Tensors.chunk(x, 2, 2, 0), owner), Tensors.own(Tensors.chunk(x, 2, 2, 1), owner)};
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

    /**
     * This rank's keys and values as one contiguous block {@code [4, b, ng, c, d]}: key chunk 0,
     * value chunk 0, key chunk 1, value chunk 1 (the local chunks {@code rank} and {@code 2·CP−1−rank}).
     */
    private static NDArray keyValueBlock(NDArray key, NDArray value, NDManager owner) {
        NDList parts = new NDList(Tensors.chunk(key, 2, 2, 0), Tensors.chunk(value, 2, 2, 0),
                Tensors.chunk(key, 2, 2, 1), Tensors.chunk(value, 2, 2, 1));
        return Tensors.own(NDArrays.stack(parts, 0), owner);
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
    private static void merge(NDArray[] outputs, NDArray[] lses, int qi, AttentionBlockKernel.Block b, NDManager owner) {
        if (outputs[qi] == null) {
            outputs[qi] = b.output();
            lses[qi] = b.logSumExp();
            return;
        }
        try (NDManager temp = owner.newSubManager()) {
            NDArray a = lses[qi];
            NDArray max = Tensors.own(a.maximum(b.logSumExp()), temp);
            NDArray total = Tensors.own(max.add(Tensors.own(a.sub(max), temp).exp().add(Tensors.own(b.logSumExp().sub(max), temp).exp()).log()), temp);
            NDArray wa = Tensors.own(a.sub(total).exp().expandDims(-1), temp);
            NDArray wb = Tensors.own(b.logSumExp().sub(total).exp().expandDims(-1), temp);
            NDArray merged = Tensors.own(Tensors.own(outputs[qi].mul(wa), temp).add(Tensors.own(b.output().mul(wb), temp)), owner);
            total.attach(owner);
            outputs[qi].close();
            b.output().close();
            a.close();
            b.logSumExp().close();
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
