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
 */
final class LocalLinear {
    private LocalLinear() {}

    /**
     * @param scope the pass's scope; owns the output
     * @param fp8 the layer's FP8 GEMMs, or null
     * @param x the local input {@code [.., in]}
     * @param w the local weight {@code [out, in]} (the parameter: FP8 caches its float8 copy per parameter)
     * @param b the bias {@code [out]}, or null
     * @return {@code x·wᵀ (+ b)}
     */
    static NDArray apply(AutogradScope scope, Fp8Linear fp8, NDArray x, Parameter w, NDArray b) {
        return fp8 == null ? Tensors.linear(x, w.data(), b, scope.manager()) : fp8.apply(scope, x, w, b);
    }
}
