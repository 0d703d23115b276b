package io.mcore4j.cuda;


import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.TensorMemory;
import io.mcore4j.core.kernel.QkvGradientKernel;


/**
 * {@link QkvGradientKernel} on CUDA: {@code qkv_gradient.cu}'s one pass, 16 bytes per thread, that
 * writes the packed gradient row by row (libtorch's concatenation of the three transposed parts is
 * three element-by-element strided copies).
 */
final class CudaQkvGradient implements QkvGradientKernel {
    /** Resource path of the CUDA source. */
    static final String SOURCE = "/io/mcore4j/cuda/qkv_gradient.cu";
    private static final int THREADS = 256;

    private final RuntimeCompiledModule module;

    CudaQkvGradient(RuntimeCompiledModule module) {
        this.module = module;
    }

    @Override
    public NDArray pack(NDArray dq, NDArray dk, NDArray dv, NDManager owner) {
        Shape q = dq.getShape();
        Shape kv = dk.getShape();
        if (q.dimension() != 4 || kv.dimension() != 4 || !kv.equals(dv.getShape()) || q.get(0) != kv.get(0)
                || q.get(1) != kv.get(1) || q.get(3) != kv.get(3) || q.get(2) % kv.get(2) != 0) {
            throw new IllegalArgumentException("query gradient " + q + " and key/value gradients " + kv + ", "
                    + dv.getShape() + " are not [s, b, heads, d] and [s, b, groups, d] with groups dividing heads");
        }
        DataType dtype = DataTypes.of(dq);
        if (DataTypes.of(dk) != dtype || DataTypes.of(dv) != dtype) {
            throw new IllegalArgumentException("query, key and value gradients must share a dtype, got " + dtype + ", "
                    + DataTypes.of(dk) + ", " + DataTypes.of(dv));
        }
        long rowBytes = q.get(3) * dtype.getNumOfBytes();
        if (rowBytes % 16 != 0 || !TensorMemory.isContiguous(dq) || !TensorMemory.isContiguous(dk)
                || !TensorMemory.isContiguous(dv)) {
            return null;
        }
        long s = q.get(0);
        long b = q.get(1);
        long heads = q.get(2);
        long groups = kv.get(2);
        long perGroup = heads / groups;
        NDArray out = DataTypes.empty(owner, new Shape(s, b, groups * (perGroup + 2) * q.get(3)), dtype, dq.getDevice());
        long rowVectors = rowBytes / 16;
        long total = s * b * groups * (perGroup + 2) * rowVectors;
        try (KernelArgs args = KernelArgs.tensors(dq, dk, dv, out).longs(s, b, groups, perGroup, rowVectors, total)) {
            module.launch("pack_qkv_gradients", (total + THREADS - 1) / THREADS, THREADS, args.pointers());
        }
        return out;
    }
}
