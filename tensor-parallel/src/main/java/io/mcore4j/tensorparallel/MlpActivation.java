package io.mcore4j.tensorparallel;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.nn.Activation;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.TorchScriptModule;
import io.mcore4j.core.TorchScriptModules;
import io.mcore4j.core.autograd.AutogradScope;

/**
 * The activation of an MLP (the dense MLP of a transformer layer, MoE experts, the shared expert),
 * between {@code linear_fc1} and {@code linear_fc2}. Megatron-LM's default is GELU (exact, erf);
 * GPT-2 checkpoints use its tanh approximation; {@code --swiglu} selects SwiGLU, whose {@code linear_fc1} produces the gate and the up projection fused as
 * {@code [gate; up]} along the last dim (twice the MLP width, split with stride 2 over TP ranks); Gemma's GeGLU
 * gates the same way with the tanh GELU.
 *
 * <p>SwiGLU and the tanh GELU each have a fused form: one call of a TorchScript module of ours
 * ({@code scripts/make_mlp_activation_modules.py}), returned by {@link #fused} and passed to
 * {@link #apply(AutogradScope, NDArray, TorchScriptModule)}; on CUDA its kernels read SwiGLU's two
 * strided halves directly. Both forms compute the same function.
 */
public enum MlpActivation {
    /** {@code gelu(fc1 x)}, the exact (erf) GELU. */
    GELU,
    /** GPT-2's GELU: {@code 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))} of {@code fc1 x}. */
    GELU_TANH,
    /** {@code silu(gate) * up} with {@code fc1 x = [gate; up]}. */
    SWIGLU,
    /** Gemma's GeGLU: {@code gelu_tanh(gate) * up} with {@code fc1 x = [gate; up]}, the tanh GELU as {@link #GELU_TANH}. */
    GEGLU_TANH;

    /**
     * @return how many tensors {@code linear_fc1} fuses along its output dim: 2 for the gated units
     *     ({@code [gate; up]}), else 1; also the partition stride of its weight
     */
    public int fc1Factor() {
        return isGated() ? 2 : 1;
    }

    /** @return whether {@code linear_fc1} gives a gate and an up projection ({@code [gate; up]}): SwiGLU and GeGLU */
    public boolean isGated() {
        return this == SWIGLU || this == GEGLU_TANH;
    }

    /**
     * Applies the activation to {@code linear_fc1}'s output. The caller still owns {@code pre}; what
     * this creates along the way is released to the scope.
     *
     * @param scope the pass's scope; owns the result
     * @param pre {@code linear_fc1}'s output {@code [.., fc1Factor() * width]}
     * @return {@code [.., width]}
     */
    public NDArray apply(AutogradScope scope, NDArray pre) {
        return apply(scope, pre, null);
    }

    /**
     * This activation's fused module: the process's one instance ({@link TorchScriptModules#shared}), so that libtorch
     * compiles its kernels once for every layer rather than once per layer.
     *
     * @return the module for SwiGLU and the tanh GELU; null for the exact GELU, which is one libtorch op, and for
     *     GeGLU, composed from libtorch's ops
     */
    public TorchScriptModule fused() {
        return switch (this) {
            case GELU, GEGLU_TANH -> null;
            case GELU_TANH -> TorchScriptModules.shared(MlpActivation.class, "/io/mcore4j/tensorparallel/gelu_tanh.pt");
            case SWIGLU -> TorchScriptModules.shared(MlpActivation.class, "/io/mcore4j/tensorparallel/swiglu.pt");
        };
    }

    /**
     * Applies the activation to {@code linear_fc1}'s output, through {@code fused} when given.
     *
     * @param scope the pass's scope; owns the result
     * @param pre {@code linear_fc1}'s output {@code [.., fc1Factor() * width]}
     * @param fused this activation's module from {@link #fused}, or null to compose it from DJL's ops
     * @return {@code [.., width]}
     */
    public NDArray apply(AutogradScope scope, NDArray pre, TorchScriptModule fused) {
        if (fused != null) {
            return Tensors.own(fused.forward(new NDList(pre)).singletonOrThrow(), scope.manager());
        }
        if (this == GELU) {
            return Tensors.own(Activation.gelu(pre), scope.manager());
        }
        if (this == GELU_TANH) {
            return scope.frame(pre, x -> geluTanh(scope.manager(), x));
        }
        if (this == GEGLU_TANH) {
            return scope.frame(pre, in -> {
                NDList parts = in.split(2, in.getShape().dimension() - 1);
                return geluTanh(scope.manager(), parts.get(0)).mul(parts.get(1));
            });
        }
        // libtorch keeps what the products' backward needs; the handles die with the frame
        return scope.frame(pre, in -> {
            NDList parts = in.split(2, in.getShape().dimension() - 1);
            NDArray gate = parts.get(0);
            return gate.mul(Activation.sigmoid(gate)).mul(parts.get(1));
        });
    }

    /**
     * The tanh GELU from elementary ops (autograd follows them); number operands as device scalars: a Java
     * number is a synchronising host copy on a GPU. The caller's frame owns the temporaries.
     */
    private static NDArray geluTanh(NDManager m, NDArray x) {
        NDArray cube = x.mul(x).mul(x);
        NDArray inner = x.add(cube.mul(Tensors.scalar(0.044715, x, m)));
        NDArray t = inner.mul(Tensors.scalar(Math.sqrt(2 / Math.PI), x, m)).tanh();
        return x.mul(Tensors.scalar(0.5, x, m)).mul(t.add(Tensors.scalar(1, x, m)));
    }
}
