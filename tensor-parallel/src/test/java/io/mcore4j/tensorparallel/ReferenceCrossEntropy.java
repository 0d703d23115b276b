package io.mcore4j.tensorparallel;

import ai.djl.Device;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDArrays;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.TensorMemory;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.kernel.CrossEntropyKernel;
import io.mcore4j.core.kernel.KernelProvider;

import java.util.Optional;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A {@link CrossEntropyKernel} for the CPU composed from DJL's ops, so that the kernel path of
 * {@link VocabParallelCrossEntropy} (which tensors it saves, the dtype and layout of the ids and of
 * the upstream gradient it hands over) runs in CPU tests; otherwise only the CUDA kernel's GPU runs
 * reach it. Registered as a test service and offered only while {@link #PROPERTY} is {@code true}
 * when the loss is computed: every other test keeps the composed path.
 *
 * <p>It keeps to the interface's contract as the CUDA kernel does: float32 math ({@code lse} the
 * log-sum-exp of each row, loss {@code lse − x[target]}, NaN for a target outside {@code [0, V)};
 * backward {@code (exp(x − lse) − onehot(target))·g} in the logits' dtype). It takes float32 and
 * float16 logits and refuses (null) other dtypes, non-contiguous logits and rows that are not a
 * multiple of 16 bytes, as the CUDA kernel does. Every tensor the contract says is contiguous (and
 * of which dtype and shape) is checked, and a violation throws: the CUDA kernel reads those tensors
 * as flat buffers and would compute garbage from a strided view.
 */
public final class ReferenceCrossEntropy implements KernelProvider {
    /** System property that turns this provider on. */
    static final String PROPERTY = "mcore4j.test.referenceCrossEntropy";
    /** Forward passes this kernel computed (so that a test can tell the kernel path ran). */
    static final AtomicInteger FORWARDS = new AtomicInteger();
    /** Forward passes this kernel refused (returned null for). */
    static final AtomicInteger REFUSALS = new AtomicInteger();
    /** Backward passes this kernel computed. */
    static final AtomicInteger BACKWARDS = new AtomicInteger();

    @Override
    public <T> Optional<T> create(Class<T> kernel, Device device) {
        if (kernel != CrossEntropyKernel.class || device.isGpu() || !Boolean.getBoolean(PROPERTY)) {
            return Optional.empty();
        }
        return Optional.of(kernel.cast(new Kernel()));
    }

    /** The contract's formulas over {@code [rows, V]} views of the contiguous inputs. */
    private static final class Kernel implements CrossEntropyKernel {
        @Override
        public NDArray[] forward(NDArray logits, NDArray target, NDManager owner) {
            if (!takes(logits)) {
                REFUSALS.incrementAndGet();
                return null;
            }
            requireIds(logits, target, "forward");
            FORWARDS.incrementAndGet();
            long vocab = vocab(logits);
            try (NDManager temp = owner.newSubManager()) {
                NDArray x = rows(logits, vocab, temp);
                NDArray ids = Tensors.own(target.reshape(-1), temp);
                NDArray inRange = Tensors.own(ids.gte(0).logicalAnd(ids.lt(vocab)), temp);
                NDArray safeIds = Tensors.own(ids.mul(inRange.toType(DataType.INT64, false)), temp);
                NDArray max = Tensors.own(x.max(new int[] {1}, true), temp);
                NDArray lse = Tensors.own(x.sub(max).exp().sum(new int[] {1}).log().add(max.squeeze(1)), temp);
                NDArray picked = Tensors.own(x.gather(safeIds.expandDims(1), 1).squeeze(1), temp);
                NDArray nan = Tensors.own(lse.zerosLike().add(Float.NaN), temp);
                NDArray loss = Tensors.own(NDArrays.where(inRange, lse.sub(picked), nan), temp);
                return new NDArray[] {
                    Tensors.own(loss.reshape(target.getShape()), owner),
                    Tensors.own(lse.reshape(target.getShape()), owner)};
            }
        }

        @Override
        public NDArray backward(NDArray logits, NDArray target, NDArray logSumExp, NDArray grad, NDManager owner) {
            if (!takes(logits)) {
                throw new IllegalArgumentException("reference cross-entropy backward: logits " + describe(logits)
                        + " are not what forward took");
            }
            requireIds(logits, target, "backward");
            requirePerToken(target, logSumExp, "log-sum-exp");
            requirePerToken(target, grad, "upstream gradient");
            BACKWARDS.incrementAndGet();
            long vocab = vocab(logits);
            try (NDManager temp = owner.newSubManager()) {
                NDArray x = rows(logits, vocab, temp);
                NDArray lse = Tensors.own(logSumExp.reshape(-1, 1), temp);
                NDArray g = Tensors.own(grad.reshape(-1, 1), temp);
                NDArray onehot = Tensors.own(target.reshape(-1).oneHot((int) vocab, DataType.FLOAT32), temp);
                NDArray d = Tensors.own(x.sub(lse).exp().sub(onehot).mul(g), temp);
                NDArray out = Tensors.own(DataTypes.toType(d, DataTypes.of(logits), false), temp);
                return Tensors.own(out.reshape(logits.getShape()), owner);
            }
        }

        /** Float32 {@code [rows, V]} values of the contiguous logits, owned by {@code temp}. */
        private static NDArray rows(NDArray logits, long vocab, NDManager temp) {
            return Tensors.own(logits.reshape(-1, vocab).toType(DataType.FLOAT32, true), temp);
        }

        private static long vocab(NDArray logits) {
            return logits.getShape().get(logits.getShape().dimension() - 1);
        }

        /** What the CUDA kernel takes, with float32 in place of bfloat16 (which DJL cannot create on the CPU). */
        private static boolean takes(NDArray logits) {
            DataType dtype = DataTypes.of(logits);
            if ((dtype != DataType.FLOAT32 && dtype != DataType.FLOAT16) || logits.size() == 0
                    || logits.getShape().dimension() < 1) {
                return false;
            }
            return vocab(logits) * dtype.getNumOfBytes() % 16 == 0 && TensorMemory.isContiguous(logits);
        }

        private static void requireIds(NDArray logits, NDArray target, String pass) {
            Shape rows = logits.getShape().slice(0, logits.getShape().dimension() - 1);
            if (target.getDataType() != DataType.INT64 || !TensorMemory.isContiguous(target)
                    || !target.getShape().equals(rows)) {
                throw new IllegalArgumentException("reference cross-entropy " + pass + ": target " + describe(target)
                        + " is not contiguous int64 of shape " + rows + " (the CUDA kernel reads it as a flat buffer)");
            }
        }

        private static void requirePerToken(NDArray target, NDArray t, String what) {
            if (t.getDataType() != DataType.FLOAT32 || !TensorMemory.isContiguous(t) || !t.getShape().equals(target.getShape())) {
                throw new IllegalArgumentException("reference cross-entropy backward: " + what + " " + describe(t)
                        + " is not contiguous float32 of shape " + target.getShape()
                        + " (the CUDA kernel reads it as a flat buffer)");
            }
        }

        private static String describe(NDArray t) {
            return DataTypes.of(t) + " " + t.getShape() + (TensorMemory.isContiguous(t) ? "" : " non-contiguous");
        }
    }
}
