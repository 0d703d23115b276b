package io.mcore4j.cuda;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.TensorMemory;
import io.mcore4j.core.kernel.LayerNormKernel;

/**
 * {@link LayerNormKernel} on CUDA: {@code layer_norm.cu}, float16 and bfloat16, one warp per row,
 * {@value #ROWS_PER_BLOCK} rows a block, rows of up to {@value #CACHED_COLUMNS} columns (held in registers, so
 * that each is read from memory once; longer rows are refused).
 */
final class CudaLayerNorm implements LayerNormKernel {
    /** Resource path of the CUDA source. */
    static final String SOURCE = "/io/mcore4j/cuda/layer_norm.cu";
    // must match layer_norm.cu
    private static final int THREADS = 256;
    private static final int ROWS_PER_BLOCK = THREADS / 32;
    /** Longest row (in columns) the kernel keeps in registers: 32 lanes x CACHED vectors x 8. */
    private static final long CACHED_COLUMNS = 32 * 8 * 8;

    private final RuntimeCompiledModule module;

    CudaLayerNorm(RuntimeCompiledModule module) {
        this.module = module;
    }

    @Override
    public NDArray[] forward(NDArray x, NDArray weight, NDArray bias, double epsilon, NDManager owner) {
        String code = KernelArgs.halfSuffix(x);
        long cols = x.getShape().get(x.getShape().dimension() - 1);
        long rows = x.size() / cols;
        if (code == null || cols > CACHED_COLUMNS || rows == 0 || !KernelArgs.vectorizable(x) || !vector(weight, x, cols)
                || !vector(bias, x, cols)) {
            return null;
        }
        DataType dtype = DataTypes.of(x);
        Shape perRow = x.getShape().slice(0, x.getShape().dimension() - 1).add(1);
        NDArray out = DataTypes.empty(owner, x.getShape(), dtype, x.getDevice());
        NDArray mean = DataTypes.empty(owner, perRow, DataType.FLOAT32, x.getDevice());
        NDArray rstd = DataTypes.empty(owner, perRow, DataType.FLOAT32, x.getDevice());
        try (KernelArgs args = KernelArgs.tensors(x, weight, bias, out, mean, rstd).longs(rows, cols).floats((float) epsilon)) {
            launch("layer_norm_forward_" + code, rows, args);
        }
        return new NDArray[] {out, mean, rstd};
    }

    @Override
    public NDArray inputGradientPlus(NDArray normedGradient, NDArray x, NDArray mean, NDArray rstd, NDArray weight,
                                     NDArray residualGradient, NDManager owner) {
        DataType dtype = DataTypes.of(x);
        String code = KernelArgs.halfSuffix(x);
        long cols = x.getShape().get(x.getShape().dimension() - 1);
        long rows = x.size() / cols;
        if (code == null || cols > CACHED_COLUMNS || rows == 0 || !like(normedGradient, x) || !like(residualGradient, x)
                || !KernelArgs.vectorizable(x) || !vector(weight, x, cols) || !perRow(mean, rows) || !perRow(rstd, rows)) {
            return null;
        }
        NDArray out = DataTypes.empty(owner, x.getShape(), dtype, x.getDevice());
        try (KernelArgs args = KernelArgs.tensors(normedGradient, x, mean, rstd, weight, residualGradient, out).longs(rows, cols)) {
            launch("layer_norm_input_gradient_plus_" + code, rows, args);
        }
        return out;
    }

    /** Launches {@code kernel} with one warp per row. */
    private void launch(String kernel, long rows, KernelArgs args) {
        module.launch(kernel, (rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK, THREADS, args.pointers());
    }

    /** Whether {@code t} is a usable {@code [cols]} vector of {@code x}'s dtype. */
    private static boolean vector(NDArray t, NDArray x, long cols) {
        return DataTypes.of(t) == DataTypes.of(x) && t.size() == cols && KernelArgs.vectorizable(t);
    }

    private static boolean like(NDArray t, NDArray x) {
        return t.getShape().equals(x.getShape()) && DataTypes.of(t) == DataTypes.of(x) && KernelArgs.vectorizable(t);
    }

    private static boolean perRow(NDArray t, long rows) {
        return t.getDataType() == DataType.FLOAT32 && t.size() == rows && TensorMemory.isContiguous(t);
    }
}
