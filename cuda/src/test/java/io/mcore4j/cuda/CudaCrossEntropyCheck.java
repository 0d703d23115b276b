package io.mcore4j.cuda;

import ai.djl.Device;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.kernel.CrossEntropyKernel;

/**
 * The GPU check of {@link CudaCrossEntropy} (needs a CUDA device; CI has none):
 * {@code java -cp <jars>:<cuda test classes> io.mcore4j.cuda.CudaCrossEntropyCheck}. float16 logits of the
 * 1.3B benchmark's vocabulary and an odd shape, against libtorch's float32 log-softmax: each loss within
 * 1e-4 of {@code −log p[target]}, the log-sum-exp likewise, and the gradient within one float16 rounding
 * (2e-3 of the upstream gradient) of {@code (softmax − onehot)·g}. Exits 1 on any failure. Also prints the
 * time of the kernels and of the composed forward at the largest shape (a figure, not a check).
 */
public final class CudaCrossEntropyCheck {
    private CudaCrossEntropyCheck() {}

    /** @param args none */
    public static void main(String[] args) {
        Device gpu = Device.gpu();
        GpuCheck check = new GpuCheck("CudaCrossEntropyCheck");
        try (NDManager m = NDManager.newBaseManager(gpu)) {
            CrossEntropyKernel kernel = GpuCheck.kernel(CrossEntropyKernel.class, gpu);
            long[][] shapes = {{4096, 32768}, {3, 1032}};
            for (long[] shape : shapes) {
                long rows = shape[0];
                long vocab = shape[1];
                NDArray logits = m.randomNormal(new Shape(rows, vocab)).mul(3).toType(DataType.FLOAT16, false);
                NDArray ids = m.randomInteger(0, vocab, new Shape(rows), DataType.INT64);
                NDArray g = m.randomUniform(0.5f, 1.5f, new Shape(rows));
                NDArray logProbs = logits.toType(DataType.FLOAT32, false).logSoftmax(1);
                NDArray wantLoss = logProbs.gather(ids.expandDims(1), 1).squeeze(1).neg();
                NDArray wantLse = logits.toType(DataType.FLOAT32, false).sub(logProbs).get(":, 0");
                NDArray onehot = ids.oneHot((int) vocab).toType(DataType.FLOAT32, false);
                NDArray wantGrad = logProbs.exp().sub(onehot).mul(g.expandDims(1));
                NDArray[] got = kernel.forward(logits, ids, m);
                boolean lossOk = got != null && got[0].sub(wantLoss).abs().max().getFloat() <= 1e-4;
                boolean lseOk = got != null && got[1].sub(wantLse).abs().max().getFloat() <= 1e-4;
                NDArray grad = got == null ? null : kernel.backward(logits, ids, got[1], g, m);
                boolean gradOk = grad != null && grad.getDataType() == DataType.FLOAT16
                        && grad.toType(DataType.FLOAT32, false).sub(wantGrad).abs().max().getFloat() <= 2e-3 * 1.5;
                String name = rows + " x " + vocab;
                check.expect(lossOk, name + " losses");
                check.expect(lseOk, name + " log-sum-exp");
                check.expect(gradOk, name + " gradient");
                if (shape == shapes[0] && got != null) {
                    time(name, kernel, logits, ids, got[1], g, m);
                }
            }
        }
        check.exit();
    }

    /** Prints the microseconds per call of forward, backward and libtorch's float32 log-softmax (200 calls after 20). */
    private static void time(String name, CrossEntropyKernel kernel, NDArray logits, NDArray ids, NDArray lse, NDArray g,
                             NDManager m) {
        GpuCheck.time(m, name + " kernel forward", 20, 200, temp -> kernel.forward(logits, ids, temp));
        GpuCheck.time(m, name + " kernel backward", 20, 200, temp -> kernel.backward(logits, ids, lse, g, temp));
        GpuCheck.time(m, name + " libtorch log-softmax (float32)", 20, 200,
                temp -> logits.toType(DataType.FLOAT32, false).logSoftmax(1).attach(temp));
    }
}
