package io.mcore4j.cuda;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.TensorMemory;
import io.mcore4j.core.kernel.CrossEntropyKernel;

/**
 * {@link CrossEntropyKernel} on CUDA: {@code cross_entropy.cu}, float16 and bfloat16 logits, one block of
 * {@value #THREADS} threads per token.
 */
final class CudaCrossEntropy implements CrossEntropyKernel {
    /** Resource path of the CUDA source. */
    static final String SOURCE = "/io/mcore4j/cuda/cross_entropy.cu";
    // must match cross_entropy.cu
    private static final int THREADS = 256;

    private final RuntimeCompiledModule module;

    CudaCrossEntropy(RuntimeCompiledModule module) {
        this.module = module;
    }

    @Override
    public NDArray[] forward(NDArray logits, NDArray target, NDManager owner) {
        String code = KernelArgs.halfSuffix(logits);
        if (code == null || !usable(logits) || !ids(logits, target)) {
            return null;
        }
        NDArray loss = DataTypes.empty(owner, target.getShape(), DataType.FLOAT32, logits.getDevice());
        NDArray lse = DataTypes.empty(owner, target.getShape(), DataType.FLOAT32, logits.getDevice());
        launch("cross_entropy_forward_" + code, logits, logits, target, loss, lse);
        return new NDArray[] {loss, lse};
    }

    @Override
    public NDArray backward(NDArray logits, NDArray target, NDArray logSumExp, NDArray grad, NDManager owner) {
        String code = KernelArgs.halfSuffix(logits);
        if (code == null || !usable(logits) || !ids(logits, target) || !perToken(target, logSumExp) || !perToken(target, grad)) {
            throw new IllegalArgumentException("cross-entropy kernel backward: logits " + logits.getShape() + " "
                    + DataTypes.of(logits) + ", target " + target.getShape() + " " + target.getDataType() + ", lse "
                    + logSumExp.getShape() + " " + logSumExp.getDataType() + ", grad " + grad.getShape() + " "
                    + grad.getDataType() + " are not what forward took (contiguous float32 per-token tensors)");
        }
        NDArray out = DataTypes.empty(owner, logits.getShape(), DataTypes.of(logits), logits.getDevice());
        launch("cross_entropy_backward_" + code, logits, logits, target, logSumExp, grad, out);
        return out;
    }

    /** Launches one block per row over {@code tensors}, then the vocabulary size. */
    private void launch(String kernel, NDArray logits, NDArray... tensors) {
        long vocab = logits.getShape().get(logits.getShape().dimension() - 1);
        try (KernelArgs args = KernelArgs.tensors(tensors).longs(vocab)) {
            module.launch(kernel, logits.size() / vocab, THREADS, args.pointers());
        }
    }

    private static boolean usable(NDArray logits) {
        return logits.size() > 0 && KernelArgs.vectorizable(logits);
    }

    private static boolean ids(NDArray logits, NDArray target) {
        int n = logits.getShape().dimension();
        return target.getDataType() == DataType.INT64 && TensorMemory.isContiguous(target)
                && target.getShape().equals(logits.getShape().slice(0, n - 1));
    }

    private static boolean perToken(NDArray target, NDArray t) {
        return t.getDataType() == DataType.FLOAT32 && TensorMemory.isContiguous(t) && t.getShape().equals(target.getShape());
    }
}
