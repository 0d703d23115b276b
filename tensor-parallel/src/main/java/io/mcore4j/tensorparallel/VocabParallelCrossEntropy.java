package io.mcore4j.tensorparallel;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDArrays;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.index.NDIndex;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.TensorMemory;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.autograd.Function;
import io.mcore4j.core.autograd.FunctionContext;
import io.mcore4j.core.kernel.CrossEntropyKernel;
import io.mcore4j.core.kernel.Kernels;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ReduceOp;

/**
 * Cross-entropy over logits split along the vocabulary, without ever gathering them: rank {@code r}
 * of the tensor-parallel group holds logits {@code [s, b, V/t]} for ids {@code [r·V/t, (r+1)·V/t)}.
 *
 * <p>Per token, in float32 whatever the logits' dtype: the maximum logit is all-reduced (max) and
 * subtracted; the target's logit (found on the rank that owns the target, zero elsewhere) and the
 * sum of exponentials are all-reduced (sum) together; the loss is {@code log Σ exp − target logit}.
 * Backward returns {@code (softmax − q) · grad} in the logits' dtype, where {@code q} is the target
 * distribution: one-hot, or smoothed as below. Every collective is over {@code tp}; with a group of
 * one nothing is communicated.
 *
 * <p><b>Label smoothing</b> with {@code ε > 0} uses the target distribution that puts {@code 1 − ε}
 * on the target and {@code ε / (V − 1)} on every other id of the full vocabulary {@code V = t · V/t}
 * (padding ids included), i.e. {@code loss = (1 − σ)·nll − σ·mean_V(log p)} with
 * {@code σ = ε·V/(V − 1)}. The mean of the log-probabilities is taken over the <em>full</em>
 * vocabulary, its per-rank sums all-reduced, so the loss is the same at every tensor-parallel size.
 * Megatron-Core's {@code VocabParallelCrossEntropy} averages the log-probabilities of the local
 * shard only and uses the local vocabulary size in {@code σ}, so its smoothed loss changes with the
 * tensor-parallel size; that is deliberately not reproduced here.
 */
public final class VocabParallelCrossEntropy {
    private VocabParallelCrossEntropy() {}

    /**
     * Per-token cross-entropy losses.
     *
     * @param scope the pass's scope; owns the result
     * @param tp the tensor-parallel communicator the logits are split over
     * @param logits this rank's logits {@code [s, b, V/t]} (or any leading dims), float32 or float16
     * @param target the target ids {@code [s, b]}, int32 or int64, in {@code [0, V)}; the same on every rank
     * @param labelSmoothing {@code ε} in {@code [0, 1)}; 0 for plain cross-entropy
     * @return float32 losses of {@code target}'s shape, an autograd leaf when the logits require grad
     * @throws IllegalArgumentException if the shapes do not match, the target is not integer, or
     *         {@code labelSmoothing} is out of range
     */
    public static NDArray lossPerToken(AutogradScope scope, Communicator tp, NDArray logits, NDArray target,
                                       double labelSmoothing) {
        return lossPerToken(scope, tp, logits, target, labelSmoothing,
                Kernels.find(CrossEntropyKernel.class, logits.getDevice()).orElse(null));
    }

    /**
     * Per-token cross-entropy losses, with the device's {@link CrossEntropyKernel} looked up by the caller
     * (once, where the same call repeats every step: {@link #lossPerToken(AutogradScope, Communicator, NDArray,
     * NDArray, double)} looks it up on each call). The kernel runs the one-rank case without smoothing where it
     * takes the logits; everything else is composed.
     *
     * @param scope the pass's scope; owns the result
     * @param tp the tensor-parallel communicator the logits are split over
     * @param logits this rank's logits {@code [s, b, V/t]} (or any leading dims), float32 or float16
     * @param target the target ids {@code [s, b]}, int32 or int64, in {@code [0, V)}; the same on every rank
     * @param labelSmoothing {@code ε} in {@code [0, 1)}; 0 for plain cross-entropy
     * @param kernel the logits' device's kernel, or null to compose
     * @return float32 losses of {@code target}'s shape, an autograd leaf when the logits require grad
     * @throws IllegalArgumentException if the shapes do not match, the target is not integer, or
     *         {@code labelSmoothing} is out of range
     */
    public static NDArray lossPerToken(AutogradScope scope, Communicator tp, NDArray logits, NDArray target,
                                       double labelSmoothing, CrossEntropyKernel kernel) {
        if (!(labelSmoothing >= 0 && labelSmoothing < 1)) {
            throw new IllegalArgumentException("label smoothing " + labelSmoothing + " is outside [0, 1)");
        }
        DataType logitsType = DataTypes.of(logits);
        if (!Tensors.isFloating(logitsType)) {
            throw new IllegalArgumentException("logits must be floating point, got " + logitsType);
        }
        DataType t = target.getDataType();
        if (t != DataType.INT32 && t != DataType.INT64) {
            throw new IllegalArgumentException("target ids must be int32 or int64, got " + t);
        }
        int n = logits.getShape().dimension();
        if (n < 1 || !logits.getShape().slice(0, n - 1).equals(target.getShape())) {
            throw new IllegalArgumentException("logits of shape " + logits.getShape()
                    + " do not match target of shape " + target.getShape() + " (expected target = logits minus the last dim)");
        }
        long vocab = logits.getShape().get(n - 1) * tp.size();
        if (labelSmoothing > 0 && vocab < 2) {
            throw new IllegalArgumentException("label smoothing needs a vocabulary of at least 2, got " + vocab);
        }
        return scope.apply1(new CrossEntropy(tp, labelSmoothing, kernel), logits, target);
    }

    /**
     * The Function; its context keeps the softmax, the local target index and its in-range mask.
     *
     * <p>Memory: the logits are [tokens, V/t], the largest activation of a GPT, and their float32
     * copies dominate the peak. Forward holds at most two full-size float32 tensors at once (the
     * shifted copy of the logits and its exponentials, which become the saved softmax in place);
     * backward turns the saved softmax into the gradient in place and writes the target entries
     * through a flat index, so it adds only the gradient in the logits' dtype (none for float32).
     * Backward therefore consumes what forward saved and refuses to run twice; the scope runs each
     * recorded node's backward once.
     */
    private record CrossEntropy(Communicator tp, double labelSmoothing, CrossEntropyKernel kernel) implements Function {

        @Override
        public NDArray[] forward(FunctionContext ctx, NDArray... inputs) {
            NDManager owner = ctx.manager();
            int last = inputs[0].getShape().dimension() - 1;
            long local = inputs[0].getShape().get(last);
            long vocab = local * tp.size();
            long start = local * tp.rank();
            if (tp.size() == 1 && labelSmoothing == 0) {
                NDArray loss = kernel == null ? null : withKernel(ctx, inputs[0], inputs[1], last);
                return new NDArray[] {loss != null ? loss : wholeVocabulary(ctx, inputs[0], inputs[1], last)};
            }
            try (NDManager temp = owner.newSubManager()) {
                // a temp-owned first operand keeps every intermediate in temp; the copy is written
                // in place, so float32 logits are cloned (DJL's toType aliases a same-dtype "copy")
                NDArray logits = Tensors.detach(inputs[0], temp);
                NDArray shifted = logits.getDataType() == DataType.FLOAT32
                        ? logits.duplicate() : logits.toType(DataType.FLOAT32, false);
                NDArray max = shifted.max(new int[] {last}, true);
                if (tp.size() > 1) {
                    max = tp.allReduce(max, ReduceOp.MAX, temp);
                }
                shifted.subi(max);

                NDArray ids = Tensors.detach(inputs[1], temp).toType(DataType.INT64, false);
                // number operands as device scalars: a Java number is a synchronising host copy on a GPU
                NDArray first = Tensors.scalar(start, ids, temp);
                NDArray inRange = ids.gte(first).logicalAnd(ids.lt(Tensors.scalar(start + local, ids, temp)));
                NDArray localIds = ids.sub(first).mul(inRange.toType(DataType.INT64, false));
                NDArray inRangeF = inRange.toType(DataType.FLOAT32, false);
                NDArray targetLogit = shifted.gather(localIds.expandDims(last), last).squeeze(last).mul(inRangeF);
                NDArray shiftedSum = labelSmoothing > 0 ? shifted.sum(new int[] {last}) : null;
                NDArray exp = shifted.exp();
                shifted.close();
                NDList sums = new NDList(targetLogit, exp.sum(new int[] {last}));
                if (shiftedSum != null) {
                    sums.add(shiftedSum);
                }
                NDArray reduced = NDArrays.stack(sums, 0);
                if (tp.size() > 1) {
                    reduced = tp.allReduce(reduced, ReduceOp.SUM, temp);
                }
                NDArray logSumExp = reduced.get(1).log();
                NDArray loss = logSumExp.sub(reduced.get(0));
                double sigma = smoothingWeight(vocab);
                if (labelSmoothing > 0) {
                    // mean over the full vocabulary of log p = sum(shifted) / V - log sum exp
                    NDArray meanLogProb = reduced.get(2).div(Tensors.scalar(vocab, reduced, temp)).sub(logSumExp);
                    loss = loss.mul(Tensors.scalar(1 - sigma, loss, temp)).sub(meanLogProb.mul(Tensors.scalar(sigma, loss, temp)));
                }
                if (ctx.needsInputGrad(0)) {
                    NDArray softmax = exp.divi(reduced.get(1).expandDims(last));
                    softmax.attach(owner);
                    localIds.attach(owner);
                    inRangeF.attach(owner);
                    ctx.saveForBackward(softmax, localIds, inRangeF);
                    ctx.setState(new Saved(DataTypes.of(inputs[0]), last, (int) local, sigma / vocab, 1 - sigma, false, null));
                }
                loss.attach(owner);
                return new NDArray[] {loss};
            }
        }

        /**
         * The vocabulary on one rank without smoothing, through the device's {@link CrossEntropyKernel}:
         * forward and backward read the logits once each, and what is saved is the logits themselves
         * (kept alive) with each token's log-sum-exp. Null where the kernel cannot take the logits.
         */
        private NDArray withKernel(FunctionContext ctx, NDArray logitsIn, NDArray targetIn, int last) {
            NDManager owner = ctx.manager();
            try (NDManager temp = owner.newSubManager()) {
                NDArray logits = Tensors.detach(logitsIn, temp);
                NDArray ids = TensorMemory.contiguous(Tensors.detach(targetIn, temp).toType(DataType.INT64, false), temp);
                NDArray[] out = kernel.forward(logits, ids, temp);
                if (out == null) {
                    return null;
                }
                if (ctx.needsInputGrad(0)) {
                    logits.attach(owner);
                    ids.attach(owner);
                    out[1].attach(owner);
                    ctx.saveForBackward(logits, ids, out[1]);
                    ctx.setState(new Saved(DataTypes.of(logitsIn), last, (int) logitsIn.getShape().get(last), 0, 1, false, kernel));
                }
                out[0].attach(owner);
                return out[0];
            }
        }

        /**
         * The vocabulary on one rank without smoothing: libtorch's fused float32 log-softmax reads the
         * logits once (widening inside the kernel) and the loss is minus the target's log-probability;
         * the log-probabilities are saved, and backward is one fused expression from them to the gradient
         * ({@link CrossEntropyGradient}). It replaces
         * six full passes over the float32 logits (widening copy, max, shift, exp, sum, divide; three
         * of them broadcasting) with one, and computes the same function: on one H200 the cross-entropy
         * of the 1.3B benchmark's two micro-batches took 9.9 ms of kernels the composed way.
         */
        private NDArray wholeVocabulary(FunctionContext ctx, NDArray logitsIn, NDArray targetIn, int last) {
            NDManager owner = ctx.manager();
            try (NDManager temp = owner.newSubManager()) {
                NDArray logits = Tensors.detach(logitsIn, temp);
                NDArray logProbs = Tensors.logSoftmax(logits, last, DataType.FLOAT32);
                logProbs.attach(temp);
                NDArray ids = Tensors.detach(targetIn, temp).toType(DataType.INT64, false).expandDims(last);
                NDArray loss = logProbs.gather(ids, last).squeeze(last).neg();
                if (ctx.needsInputGrad(0)) {
                    logProbs.attach(owner);
                    ids.attach(owner);
                    ctx.saveForBackward(logProbs, ids);
                    ctx.setState(new Saved(DataTypes.of(logitsIn), last, (int) logitsIn.getShape().get(last), 0, 1, true, null));
                }
                loss.attach(owner);
                return loss;
            }
        }

        /**
         * {@code (softmax − q)·g}, computed as {@code (softmax − u)·g} everywhere and
         * {@code ((softmax − w·inRange) − u)·g} at each token's target, where {@code q} puts
         * {@code w} on the target (when this rank owns it) and {@code u} on every id.
         */
        @Override
        public NDArray[] backward(FunctionContext ctx, NDArray... grads) {
            Saved s = ctx.state(Saved.class);
            s.consume();
            NDManager owner = ctx.manager();
            if (s.kernel() != null || s.logProbabilities()) {
                // the whole vocabulary on this rank, no smoothing: the kernel from the saved logits, ids and
                // log-sum-exps, or one fused expression from the saved log-probabilities and ids
                try (NDManager temp = owner.newSubManager()) {
                    NDArray g = Tensors.detach(grads[0], temp).toType(DataType.FLOAT32, false);
                    NDArray gradLogits = s.kernel() != null
                            ? s.kernel().backward(ctx.saved(0), ctx.saved(1), ctx.saved(2), TensorMemory.contiguous(g, temp), owner)
                            : CrossEntropyGradient.get().compute(ctx.saved(0), ctx.saved(1), g.expandDims(s.lastDim()),
                                    s.logitsType(), owner);
                    ctx.saved(0).close();
                    ctx.saveForBackward();
                    return new NDArray[] {gradLogits, null};
                }
            }
            try (NDManager temp = owner.newSubManager()) {
                NDArray grad = Tensors.detach(ctx.saved(0), temp);
                NDArray ids = Tensors.detach(ctx.saved(1), temp).expandDims(s.lastDim());
                NDArray inRange = Tensors.detach(ctx.saved(2), temp).expandDims(s.lastDim());
                // from here on the only handle to the softmax's memory is grad, which becomes the gradient
                ctx.saved(0).close();
                ctx.saveForBackward();
                NDArray g = Tensors.detach(grads[0], temp).toType(DataType.FLOAT32, false).expandDims(s.lastDim());

                NDArray target = Tensors.scalar(s.targetWeight(), grad, temp);
                NDArray atTarget = grad.gather(ids, s.lastDim()).sub(inRange.mul(target));
                if (s.uniformWeight() > 0) {
                    NDArray uniform = Tensors.scalar(s.uniformWeight(), grad, temp);
                    atTarget = atTarget.sub(uniform);
                    grad.subi(uniform);
                }
                atTarget = atTarget.mul(g);
                grad.muli(g);
                // one entry per token: row · V/t + local id (an out-of-range token rewrites its entry
                // 0 with the value it already holds, since its target weight is zero there)
                // (grad is the contiguous buffer forward allocated, so the flat reshape is a view)
                int rows = Math.toIntExact(grad.getShape().size() / s.localVocab());
                NDArray rowIds = temp.arange(0, rows, 1, DataType.INT64);
                NDArray flatIds = rowIds.mul(Tensors.scalar(s.localVocab(), rowIds, temp)).add(ids.reshape(-1));
                grad.reshape(-1).set(new NDIndex("{}", flatIds), atTarget.reshape(-1));

                NDArray gradLogits = DataTypes.toType(grad, s.logitsType(), false);
                gradLogits.attach(owner);
                if (gradLogits != grad) {
                    grad.close();
                }
                return new NDArray[] {gradLogits, null};
            }
        }

        @Override
        public String name() {
            return "vocab-parallel-cross-entropy";
        }

        private double smoothingWeight(long vocab) {
            return labelSmoothing > 0 ? labelSmoothing * vocab / (vocab - 1) : 0;
        }
    }

    /**
     * What backward needs besides tensors: {@code q = targetWeight·onehot + uniformWeight}, and
     * whether backward has consumed the saved softmax.
     */
    private static final class Saved {
        private final DataType logitsType;
        private final int lastDim;
        private final int localVocab;
        private final double uniformWeight;
        private final double targetWeight;
        private final boolean logProbabilities;
        private final CrossEntropyKernel kernel;
        private boolean consumed;

        Saved(DataType logitsType, int lastDim, int localVocab, double uniformWeight, double targetWeight,
              boolean logProbabilities, CrossEntropyKernel kernel) {
            this.logProbabilities = logProbabilities;
            this.kernel = kernel;
            this.logitsType = logitsType;
            this.lastDim = lastDim;
            this.localVocab = localVocab;
            this.uniformWeight = uniformWeight;
            this.targetWeight = targetWeight;
        }

        DataType logitsType() {
            return logitsType;
        }

        int lastDim() {
            return lastDim;
        }

        int localVocab() {
            return localVocab;
        }

        double uniformWeight() {
            return uniformWeight;
        }

        double targetWeight() {
            return targetWeight;
        }

        /** Whether the first saved tensor holds log-probabilities (the one-rank path) rather than the softmax. */
        boolean logProbabilities() {
            return logProbabilities;
        }

        /** The kernel that computed forward (the saved tensors are then logits, ids, log-sum-exp), or null. */
        CrossEntropyKernel kernel() {
            return kernel;
        }

        /** Marks the saved softmax as turned into a gradient; a second backward is a defect. */
        void consume() {
            if (consumed) {
                throw new IllegalStateException("vocab-parallel-cross-entropy: backward ran twice for one forward;"
                        + " the first consumed the saved softmax");
            }
            consumed = true;
        }
    }
}
