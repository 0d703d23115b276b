package io.mcore4j.cuda;

import ai.djl.Device;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDArrays;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.kernel.QkvGradientKernel;

/**
 * The GPU check of {@link CudaQkvGradient} (needs a CUDA device; CI has none):
 * {@code java -cp <jars>:<cuda test classes> io.mcore4j.cuda.CudaQkvGradientCheck}. Random query,
 * key and value gradients, float16 and float32, grouped and plain attention; the packed tensor must
 * equal libtorch's concatenation of the transposed parts bit for bit, and a row that is not a
 * multiple of 16 bytes must be declined (null). Exits 1 on any failure.
 */
public final class CudaQkvGradientCheck {
    private CudaQkvGradientCheck() {}

    /** @param args none */
    public static void main(String[] args) {
        Device gpu = Device.gpu();
        GpuCheck check = new GpuCheck("CudaQkvGradientCheck");
        try (NDManager m = NDManager.newBaseManager(gpu)) {
            QkvGradientKernel kernel = GpuCheck.kernel(QkvGradientKernel.class, gpu);
            int[][] cases = {{2, 16, 16, 128, 64}, {3, 8, 2, 64, 40}, {1, 4, 4, 32, 7}};
            for (DataType dtype : new DataType[] {DataType.FLOAT16, DataType.FLOAT32}) {
                for (int[] c : cases) {
                    int b = c[0];
                    int heads = c[1];
                    int groups = c[2];
                    int d = c[3];
                    int s = c[4];
                    NDArray dq = m.randomNormal(new Shape(s, b, heads, d)).toType(dtype, false);
                    NDArray dk = m.randomNormal(new Shape(s, b, groups, d)).toType(dtype, false);
                    NDArray dv = m.randomNormal(new Shape(s, b, groups, d)).toType(dtype, false);
                    int per = heads / groups;
                    NDArray want = NDArrays.concat(new NDList(dq.reshape(s, b, groups, per, d),
                            dk.reshape(s, b, groups, 1, d), dv.reshape(s, b, groups, 1, d)), 3).reshape(s, b, -1);
                    NDArray got = kernel.pack(dq, dk, dv, m);
                    boolean ok = got != null && got.getShape().equals(want.getShape())
                            && got.toType(DataType.FLOAT32, false).eq(want.toType(DataType.FLOAT32, false)).all().getBoolean();
                    String name = dtype + " b " + b + " heads " + heads + " groups " + groups + " d " + d + " s " + s;
                    check.expect(ok, name);
                }
            }
            NDArray odd = m.zeros(new Shape(3, 1, 2, 6), DataType.FLOAT16);
            NDArray oddKv = m.zeros(new Shape(3, 1, 1, 6), DataType.FLOAT16);
            boolean declined = kernel.pack(odd, oddKv, oddKv, m) == null;
            check.expect(declined, "rows of 12 bytes are declined");
        }
        check.exit();
    }
}
