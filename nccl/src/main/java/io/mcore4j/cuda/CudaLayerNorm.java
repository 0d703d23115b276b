package io.mcore4j.cuda;

import static io.mcore4j.cuda.RuntimeCompiledModule.longArg;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.TensorMemory;
import io.mcore4j.core.kernel.LayerNormKernel;
import io.mcore4j.parallel.nccl.DevicePointers;

import org.bytedeco.javacpp.FloatPointer;
import org.bytedeco.javacpp.Pointer;

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
        String code = code(x);
        long cols = x.getShape().get(x.getShape().dimension() - 1);
        long rows = x.size() / cols;
        if (code == null || cols % 8 != 0 || cols > CACHED_COLUMNS || rows == 0 || !usable(x) || !vector(weight, x, cols)
                || !vector(bias, x, cols)) {
            return null;
        }
        DataType dtype = DataTypes.of(x);
        Shape perRow = x.getShape().slice(0, x.getShape().dimension() - 1).add(1);
        NDArray out = DataTypes.empty(owner, x.getShape(), dtype, x.getDevice());
        NDArray mean = DataTypes.empty(owner, perRow, DataType.FLOAT32, x.getDevice());
        NDArray rstd = DataTypes.empty(owner, perRow, DataType.FLOAT32, x.getDevice());
        NDArray[] tensors = {x, weight, bias, out, mean, rstd};
        Pointer[] args = new Pointer[tensors.length + 3];
        for (int i = 0; i < tensors.length; i++) {
            args[i] = longArg(DevicePointers.address(tensors[i]));
        }
        args[tensors.length] = longArg(rows);
        args[tensors.length + 1] = longArg(cols);
        args[tensors.length + 2] = new FloatPointer((float) epsilon);
        launch("layer_norm_forward_" + code, rows, args);
        return new NDArray[] {out, mean, rstd};
    }

    @Override
    public NDArray inputGradientPlus(NDArray normedGradient, NDArray x, NDArray mean, NDArray rstd, NDArray weight,
                                     NDArray residualGradient, NDManager owner) {
        DataType dtype = DataTypes.of(x);
        String code = code(x);
        long cols = x.getShape().get(x.getShape().dimension() - 1);
        long rows = x.size() / cols;
        if (code == null || cols % 8 != 0 || cols > CACHED_COLUMNS || rows == 0 || !like(normedGradient, x) || !like(residualGradient, x)
                || !usable(x) || !vector(weight, x, cols) || !perRow(mean, rows) || !perRow(rstd, rows)) {
            return null;
        }
        NDArray out = DataTypes.empty(owner, x.getShape(), dtype, x.getDevice());
        NDArray[] tensors = {normedGradient, x, mean, rstd, weight, residualGradient, out};
        Pointer[] args = new Pointer[tensors.length + 2];
        for (int i = 0; i < tensors.length; i++) {
            args[i] = longArg(DevicePointers.address(tensors[i]));
        }
        args[tensors.length] = longArg(rows);
        args[tensors.length + 1] = longArg(cols);
        launch("layer_norm_input_gradient_plus_" + code, rows, args);
        return out;
    }

    /** Launches {@code kernel} with one warp per row and closes the arguments. */
    private void launch(String kernel, long rows, Pointer... args) {
        try {
            module.launch(kernel, (rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK, THREADS, args);
        } finally {
            for (Pointer p : args) {
                p.close();
            }
        }
    }

    private static String code(NDArray x) {
        return switch (DataTypes.of(x)) {
            case FLOAT16 -> "f16";
            case BFLOAT16 -> "bf16";
            default -> null;
        };
    }

    /** Whether {@code t} is a usable {@code [cols]} vector of {@code x}'s dtype. */
    private static boolean vector(NDArray t, NDArray x, long cols) {
        return DataTypes.of(t) == DataTypes.of(x) && t.size() == cols && usable(t);
    }

    private static boolean like(NDArray t, NDArray x) {
        return t.getShape().equals(x.getShape()) && DataTypes.of(t) == DataTypes.of(x) && usable(t);
    }

    private static boolean usable(NDArray t) {
        return TensorMemory.isContiguous(t) && DevicePointers.address(t) % 16 == 0;
    }

    private static boolean perRow(NDArray t, long rows) {
        return t.getDataType() == DataType.FLOAT32 && t.size() == rows && TensorMemory.isContiguous(t);
    }
}
