package io.mcore4j.cuda;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.kernel.BiasGradientKernel;

import java.util.Arrays;

/**
 * {@link BiasGradientKernel} on CUDA: {@code bias_gradients.cu}, float16 and bfloat16. Each launch
 * writes float32 partial column sums per block of rows ({@value #GELU_ROWS} for the GELU's backward,
 * {@value #SUM_ROWS} for plain column sums: the faster of each on an H200), summed afterwards by
 * libtorch in a fixed order.
 */
final class CudaBiasGradients implements BiasGradientKernel {
    /** Resource path of the CUDA source. */
    static final String SOURCE = "/io/mcore4j/cuda/bias_gradients.cu";
    // must match bias_gradients.cu
    private static final int THREADS = 128;
    private static final int GELU_ROWS = 32;
    private static final int SUM_ROWS = 64;

    private final RuntimeCompiledModule module;

    CudaBiasGradients(RuntimeCompiledModule module) {
        this.module = module;
    }

    @Override
    public NDArray[] geluBackward(NDArray h, NDArray dy, NDManager owner) {
        String code = KernelArgs.halfSuffix(h);
        if (code == null || !h.getShape().equals(dy.getShape()) || DataTypes.of(dy) != DataTypes.of(h)
                || !KernelArgs.vectorizable(h) || !KernelArgs.vectorizable(dy)) {
            return null;
        }
        long cols = h.getShape().get(h.getShape().dimension() - 1);
        long rows = h.size() / cols;
        NDArray dh = DataTypes.empty(owner, h.getShape(), DataTypes.of(h), h.getDevice());
        NDArray sums = launch("gelu_backward_colsum_" + code, GELU_ROWS, rows, cols, owner, h, dy, dh);
        return new NDArray[] {dh, sums};
    }

    @Override
    public NDArray columnSum(NDArray x, NDManager owner) {
        String code = KernelArgs.halfSuffix(x);
        if (code == null || !KernelArgs.vectorizable(x)) {
            return null;
        }
        long cols = x.getShape().get(x.getShape().dimension() - 1);
        return launch("column_sum_" + code, SUM_ROWS, x.size() / cols, cols, owner, x);
    }

    /** Launches over {@code tensors} (inputs, then the output if any), {@code rowsPerBlock} rows a block, and sums the partials. */
    private NDArray launch(String kernel, int rowsPerBlock, long rows, long cols, NDManager owner, NDArray... tensors) {
        long rowBlocks = (rows + rowsPerBlock - 1) / rowsPerBlock;
        long colBlocks = (cols / 8 + THREADS - 1) / THREADS;
        try (NDManager temp = owner.newSubManager()) {
            NDArray partials = DataTypes.empty(temp, new Shape(rowBlocks, cols), DataType.FLOAT32, tensors[0].getDevice());
            NDArray[] operands = Arrays.copyOf(tensors, tensors.length + 1);
            operands[tensors.length] = partials;
            try (KernelArgs args = KernelArgs.tensors(operands).longs(rows, cols)) {
                module.launch2d(kernel, colBlocks, rowBlocks, THREADS, args.pointers());
            }
            return Tensors.own(partials.sum(new int[] {0}), owner);
        }
    }
}
