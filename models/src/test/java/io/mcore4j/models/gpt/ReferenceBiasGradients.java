package io.mcore4j.models.gpt;

import ai.djl.Device;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.kernel.BiasGradientKernel;
import io.mcore4j.core.kernel.KernelProvider;
import io.mcore4j.core.kernel.LayerNormKernel;

import java.util.Optional;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A {@link BiasGradientKernel} for the CPU composed from DJL's ops (the exact GELU's derivative
 * written out with {@code erf}, float32 column sums), and a {@link LayerNormKernel} (the
 * LayerNorm's input gradient written out in float32, plus the residual's), so that a CPU test can run
 * the layers that take the MLP half as one Function ({@code TransformerLayer} builds one only where a device has
 * this kernel; otherwise only the CUDA kernel's GPU runs reach it). Registered as a test service and
 * offered only while {@link #PROPERTY} is {@code true} when a layer is built: every other test keeps
 * the composed half.
 */
public final class ReferenceBiasGradients implements KernelProvider {
    /** System property that turns this provider on. */
    static final String PROPERTY = "mcore4j.test.referenceBiasGradients";
    /** GELU backward passes taken through this kernel (so that a test can tell the MLP half ran). */
    static final AtomicInteger GELU_BACKWARDS = new AtomicInteger();
    /** Column sums taken through this kernel. */
    static final AtomicInteger COLUMN_SUMS = new AtomicInteger();
    /** LayerNorm input gradients taken through the LayerNorm kernel. */
    static final AtomicInteger NORM_GRADIENTS = new AtomicInteger();
    /** LayerNorm forwards taken through the LayerNorm kernel. */
    static final AtomicInteger NORM_FORWARDS = new AtomicInteger();

    private static final double SQRT_HALF = Math.sqrt(0.5);
    private static final double INV_SQRT_2PI = 1 / Math.sqrt(2 * Math.PI);

    @Override
    public <T> Optional<T> create(Class<T> kernel, Device device) {
        if (device.isGpu() || !Boolean.getBoolean(PROPERTY)) {
            return Optional.empty();
        }
        if (kernel == BiasGradientKernel.class) {
            return Optional.of(kernel.cast(new Kernel()));
        }
        if (kernel == LayerNormKernel.class) {
            return Optional.of(kernel.cast(new NormKernel()));
        }
        return Optional.empty();
    }

    /**
     * Forward: {@code (x − mean) · rstd · w + b} with the biased variance, in float32. Input gradient:
     * {@code dy + rstd · (g − mean(g) − x̂ · mean(g · x̂))} with {@code g = dn · w} and
     * {@code x̂ = (x − mean) · rstd}, in float32, rounded once to {@code x}'s dtype.
     */
    private static final class NormKernel implements LayerNormKernel {
        @Override
        public NDArray[] forward(NDArray x, NDArray weight, NDArray bias, double epsilon, NDManager owner) {
            NORM_FORWARDS.incrementAndGet();
            int last = x.getShape().dimension() - 1;
            try (NDManager temp = owner.newSubManager()) {
                NDArray wide = Tensors.own(DataTypes.toType(x, DataType.FLOAT32, true), temp);
                NDArray mean = wide.mean(new int[] {last}, true);
                NDArray centered = wide.sub(mean);
                NDArray rstd = centered.square().mean(new int[] {last}, true).add(epsilon).sqrt().pow(-1);
                NDArray out = centered.mul(rstd).mul(DataTypes.toType(weight, DataType.FLOAT32, true)).add(DataTypes.toType(bias, DataType.FLOAT32, true));
                // the statistics in x's dtype: libtorch's LayerNorm backward on the CPU takes them so (the CUDA kernel's
                // are float32, which libtorch's CUDA backward takes)
                DataType type = DataTypes.of(x);
                return new NDArray[] {Tensors.own(DataTypes.toType(out, type, true), owner),
                    Tensors.own(DataTypes.toType(mean, type, false), owner), Tensors.own(DataTypes.toType(rstd, type, false), owner)};
            }
        }

        @Override
        public NDArray inputGradientPlus(NDArray normedGradient, NDArray x, NDArray mean, NDArray rstd, NDArray weight,
                                         NDArray residualGradient, NDManager owner) {
            NORM_GRADIENTS.incrementAndGet();
            int last = x.getShape().dimension() - 1;
            try (NDManager temp = owner.newSubManager()) {
                NDArray xhat = Tensors.own(DataTypes.toType(x, DataType.FLOAT32, true), temp).sub(mean).mul(rstd);
                NDArray g = Tensors.own(DataTypes.toType(normedGradient, DataType.FLOAT32, true), temp)
                        .mul(DataTypes.toType(weight, DataType.FLOAT32, true));
                NDArray meanG = g.mean(new int[] {last}, true);
                NDArray meanGx = g.mul(xhat).mean(new int[] {last}, true);
                NDArray dx = g.sub(meanG).sub(xhat.mul(meanGx)).mul(rstd);
                NDArray out = Tensors.own(DataTypes.toType(residualGradient, DataType.FLOAT32, true), temp).add(dx);
                return Tensors.own(DataTypes.toType(out, DataTypes.of(x), true), owner);
            }
        }
    }

    /** {@code dy · (Φ(h) + h·φ(h))} computed in float32, and float32 column sums. */
    private static final class Kernel implements BiasGradientKernel {
        @Override
        public NDArray[] geluBackward(NDArray h, NDArray dy, NDManager owner) {
            GELU_BACKWARDS.incrementAndGet();
            try (NDManager temp = owner.newSubManager()) {
                NDArray x = Tensors.own(DataTypes.toType(h, DataType.FLOAT32, true), temp);
                NDArray g = Tensors.own(DataTypes.toType(dy, DataType.FLOAT32, true), temp);
                NDArray cdf = x.mul(SQRT_HALF).erf().add(1).mul(0.5);
                NDArray pdf = x.square().mul(-0.5).exp().mul(INV_SQRT_2PI);
                NDArray dh = Tensors.own(DataTypes.toType(g.mul(cdf.add(x.mul(pdf))), DataTypes.of(h), true), owner);
                return new NDArray[] {dh, columnSums(dh, owner)};
            }
        }

        @Override
        public NDArray columnSum(NDArray x, NDManager owner) {
            COLUMN_SUMS.incrementAndGet();
            return columnSums(x, owner);
        }

        /** The float32 column sums of {@code x} as given (in its own dtype's rounding), owned by {@code owner}. */
        private static NDArray columnSums(NDArray x, NDManager owner) {
            try (NDManager temp = owner.newSubManager()) {
                long cols = x.getShape().get(x.getShape().dimension() - 1);
                NDArray rows = Tensors.own(x.reshape(-1, cols), temp);
                NDArray wide = DataTypes.toType(rows, DataType.FLOAT32, true);
                return Tensors.own(wide.sum(new int[] {0}), owner);
            }
        }
    }
}
