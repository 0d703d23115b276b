package io.mcore4j.tensorparallel;

import ai.djl.ndarray.NDArray;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.fp8.Fp8Linear;
import io.mcore4j.core.nn.Parameter;

/**
 * The one place that chooses how a parallel linear multiplies its local shard: in the parameter dtype
 * ({@link Tensors#linear}), or in FP8 ({@link Fp8Linear}) when the layer was built with
 * {@link ParallelLinearBuilder#fp8}. The communication around it is the same either way.
 *
 * <p><b>Gradient accumulation fusion.</b> Unless the layer was built with
 * {@link ParallelLinearBuilder#gradientAccumulationFusion} false, under autograd on a GPU the parameter-dtype linear is
 * {@link AccumulatingLinear}, whose backward adds the weight gradient into {@code .grad} inside its GEMM (as Megatron
 * does by default), and so do the Functions of this package that compute their weight gradients themselves
 * ({@link LinearWeightGradients}); {@link #FUSION_PROPERTY} {@code =false} composes the linear from libtorch's autograd
 * and adds the Functions' products in a second pass instead, {@code =true} fuses on every device (the CPU's tests).
 * The default leaves the CPU composed: there the GEMM can sum in another order than a product and an add, and the
 * CPU's results stay as they were.
 */
final class LocalLinear {
    /** System property: {@code gpu} (default), {@code true} or {@code false}, read at every call. */
    static final String FUSION_PROPERTY = "mcore4j.tensorparallel.gradientAccumulationFusion";

    private LocalLinear() {}

    /**
     * @param scope the pass's scope; owns the output
     * @param fp8 the layer's FP8 GEMMs, or null
     * @param x the local input {@code [.., in]}
     * @param w the local weight {@code [out, in]} (the parameter: FP8 caches its float8 copy per parameter)
     * @param b the bias {@code [out]}, or null
     * @param fusion whether the layer lets its weight gradient be added into {@code .grad} by the GEMM (Megatron's
     *     {@code gradient_accumulation_fusion}); it then is where {@link #FUSION_PROPERTY} says so for the device
     * @return {@code x·wᵀ (+ b)}
     * @throws IllegalArgumentException if {@link #FUSION_PROPERTY} is set to something else than its three values
     */
    static NDArray apply(AutogradScope scope, Fp8Linear fp8, NDArray x, Parameter w, NDArray b, boolean fusion) {
        if (fp8 != null) {
            return fp8.apply(scope, x, w, b);
        }
        if (fusion && scope.isGradEnabled() && fusesAccumulation(w.data())) {
            AccumulatingLinear f = new AccumulatingLinear();
            return b == null ? scope.apply1(f, x, w.data()) : scope.apply1(f, x, w.data(), b);
        }
        return Tensors.linear(x, w.data(), b, scope.manager());
    }

    /**
     * Whether a linear's weight gradient is added into {@code .grad} by its GEMM ({@link LinearWeightGradients} asks
     * too, for the Functions of this package that compute their weight gradients themselves).
     *
     * @param w the weight
     * @return what {@link #FUSION_PROPERTY} says for its device
     * @throws IllegalArgumentException if the property has another value
     */
    static boolean fusesAccumulation(NDArray w) {
        String value = System.getProperty(FUSION_PROPERTY, "gpu");
        return switch (value) {
            case "gpu" -> w.getDevice().isGpu();
            case "true" -> true;
            case "false" -> false;
            default -> throw new IllegalArgumentException("-D" + FUSION_PROPERTY + "=" + value
                    + ": expected gpu, true or false");
        };
    }
}
