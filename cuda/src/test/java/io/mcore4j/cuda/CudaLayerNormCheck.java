package io.mcore4j.cuda;

import ai.djl.Device;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.kernel.LayerNormKernel;

/**
 * The GPU check of {@link CudaLayerNorm} (needs a CUDA device; CI has none):
 * {@code java -cp <jars>:<cuda test classes> io.mcore4j.cuda.CudaLayerNormCheck}. float16, the 1.3B
 * model's LayerNorm shape and odd ones (and one longer than the kernel takes: refused), against the same functions
 * composed in float32 from libtorch's ops: the forward's statistics within 1e-5 of their magnitude and its output,
 * and the input gradient plus residual ({@code dy + rstd·(g − mean(g) − x̂·mean(g·x̂))}, {@code g = dn·w}),
 * within one float16 rounding ({@code 2e-3} of the larger of the magnitude and 1). Exits 1 on any failure. Also
 * prints the time per call at the largest shape (a figure, not a check).
 */
public final class CudaLayerNormCheck {
    private CudaLayerNormCheck() {}

    /** @param args none */
    public static void main(String[] args) {
        Device gpu = Device.gpu();
        GpuCheck check = new GpuCheck("CudaLayerNormCheck");
        try (NDManager m = NDManager.newBaseManager(gpu)) {
            LayerNormKernel kernel = GpuCheck.kernel(LayerNormKernel.class, gpu);
            long[][] shapes = {{2048, 4, 2048}, {77, 1032}, {3, 1, 8}, {5, 4104}};
            for (long[] dims : shapes) {
                Shape shape = new Shape(dims);
                int last = dims.length - 1;
                long cols = dims[last];
                NDArray x = m.randomNormal(shape).mul(2).add(0.5).toType(DataType.FLOAT16, false);
                NDArray dn = m.randomNormal(shape).toType(DataType.FLOAT16, false);
                NDArray dy = m.randomNormal(shape).toType(DataType.FLOAT16, false);
                NDArray w = m.randomNormal(new Shape(cols)).mul(0.2).add(1).toType(DataType.FLOAT16, false);
                NDArray bias = m.randomNormal(new Shape(cols)).mul(0.2).toType(DataType.FLOAT16, false);
                NDArray xf = x.toType(DataType.FLOAT32, false);
                NDArray mean = xf.mean(new int[] {last}, true);
                NDArray centered = xf.sub(mean);
                NDArray rstd = centered.square().mean(new int[] {last}, true).add(1e-5).sqrt().pow(-1);
                NDArray xhat = centered.mul(rstd);
                NDArray g = dn.toType(DataType.FLOAT32, false).mul(w.toType(DataType.FLOAT32, false));
                NDArray want = dy.toType(DataType.FLOAT32, false).add(g.sub(g.mean(new int[] {last}, true))
                        .sub(xhat.mul(g.mul(xhat).mean(new int[] {last}, true))).mul(rstd));
                String name = shape.toString();
                NDArray[] fwd = kernel.forward(x, w, bias, 1e-5, m);
                if (cols <= 2048) {
                    NDArray wantOut = xhat.mul(w.toType(DataType.FLOAT32, false)).add(bias.toType(DataType.FLOAT32, false));
                    boolean fwdOk = fwd != null && fwd[0].getDataType() == DataType.FLOAT16
                            && within(fwd[0].toType(DataType.FLOAT32, false), wantOut, 2e-3)
                            && within(fwd[1], mean, 1e-5) && within(fwd[2], rstd, 1e-5);
                    check.expect(fwdOk, name + " forward");
                } else {
                    boolean refused = fwd == null;
                    check.expect(refused, name + " forward refused (row longer than it holds)");
                }
                NDArray got = kernel.inputGradientPlus(dn, x, mean, rstd, w, dy, m);
                if (cols > 2048) {
                    boolean refused = got == null;
                    check.expect(refused, name + " input gradient refused (row longer than it holds)");
                    continue;
                }
                boolean ok = got != null && got.getDataType() == DataType.FLOAT16 && got.getShape().equals(shape)
                        && within(got.toType(DataType.FLOAT32, false), want, 2e-3);
                check.expect(ok, name + " input gradient plus residual");
                if (dims == shapes[0] && got != null) {
                    time(name, kernel, dn, x, mean, rstd, w, dy, m);
                }
            }
        }
        check.exit();
    }

    /** Whether every element of {@code got} is within {@code tolerance} of the larger of the expected magnitude and 1. */
    private static boolean within(NDArray got, NDArray want, double tolerance) {
        return got.getShape().equals(want.getShape())
                && got.sub(want).abs().sub(want.abs().maximum(1).mul(tolerance)).max().getFloat() <= 0;
    }

    /** Prints the microseconds per call (200 calls after 20). */
    private static void time(String name, LayerNormKernel kernel, NDArray dn, NDArray x, NDArray mean,
                             NDArray rstd, NDArray w, NDArray dy, NDManager m) {
        GpuCheck.time(m, name + " forward", 20, 200, temp -> kernel.forward(x, w, w, 1e-5, temp));
        GpuCheck.time(m, name + " input gradient plus residual", 20, 200,
                temp -> kernel.inputGradientPlus(dn, x, mean, rstd, w, dy, temp));
    }
}
