package io.mcore4j.cuda;

import ai.djl.Device;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import ai.djl.nn.Activation;
import ai.djl.training.GradientCollector;
import io.mcore4j.core.kernel.BiasGradientKernel;

/**
 * The GPU check of {@link CudaBiasGradients} (needs a CUDA device; CI has none):
 * {@code java -cp <jars>:<cuda test classes> io.mcore4j.cuda.CudaBiasGradientsCheck}. float16, shapes
 * of the 1.3B model's MLP and odd row counts: the GELU backward equals libtorch's autograd bit for bit,
 * the column sums libtorch's float32 sums within 1e-3 of their magnitude. Exits 1 on any failure. Also
 * prints the time per call of both kernels at the largest shape (a figure, not a check).
 */
public final class CudaBiasGradientsCheck {
    private CudaBiasGradientsCheck() {}

    /** Prints the microseconds per call of both kernels on {@code h, dy} (20 calls after 3 warm-up calls). */
    private static void time(String name, BiasGradientKernel kernel, NDArray h, NDArray dy, NDManager m) {
        GpuCheck.time(m, name + " GELU backward + column sums", 3, 20, temp -> kernel.geluBackward(h, dy, temp));
        GpuCheck.time(m, name + " column sums", 3, 20, temp -> kernel.columnSum(dy, temp));
    }

    /** @param args none */
    public static void main(String[] args) {
        Device gpu = Device.gpu();
        GpuCheck check = new GpuCheck("CudaBiasGradientsCheck");
        try (NDManager m = NDManager.newBaseManager(gpu)) {
            BiasGradientKernel kernel = GpuCheck.kernel(BiasGradientKernel.class, gpu);
            long[][] shapes = {{8192, 8192}, {8192, 2048}, {77, 64}, {3, 1032}};
            for (long[] shape : shapes) {
                NDArray h = m.randomNormal(new Shape(shape)).mul(2).toType(DataType.FLOAT16, false);
                NDArray dy = m.randomNormal(new Shape(shape)).toType(DataType.FLOAT16, false);
                h.setRequiresGradient(true);
                try (GradientCollector c = m.getEngine().newGradientCollector()) {
                    c.backward(Activation.gelu(h).mul(dy).sum());
                }
                NDArray want = h.getGradient().toType(DataType.FLOAT32, false);
                NDArray[] got = kernel.geluBackward(h.stopGradient(), dy, m);
                boolean ok = got != null && got[0].toType(DataType.FLOAT32, false).eq(want).all().getBoolean();
                NDArray wantSums = want.sum(new int[] {0});
                double scale = wantSums.abs().max().getFloat() + 1;
                boolean sumsOk = got != null && got[1].sub(wantSums).abs().max().getFloat() <= 1e-3 * scale;
                NDArray colWant = dy.toType(DataType.FLOAT32, false).sum(new int[] {0});
                NDArray col = kernel.columnSum(dy, m);
                boolean colOk = col != null && col.sub(colWant).abs().max().getFloat()
                        <= 1e-3 * (colWant.abs().max().getFloat() + 1);
                String name = shape[0] + " x " + shape[1];
                check.expect(ok, name + " GELU backward bitwise");
                check.expect(sumsOk, name + " its column sums");
                check.expect(colOk, name + " column sums");
                if (shape == shapes[0]) {
                    time(name, kernel, h.stopGradient(), dy, m);
                }
            }
        }
        check.exit();
    }
}
