package io.mcore4j.models.transformer;

import ai.djl.Device;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.TorchScriptModule;
import io.mcore4j.core.TorchScriptModules;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.nn.AbstractModule;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.nn.UnaryModule;
import io.mcore4j.models.TransformerConfig;

/**
 * LayerNorm (weight and bias) or RMSNorm (weight) over the last dim, accumulated in float32 whatever
 * the parameter dtype, each one libtorch call: {@code layer_norm}, or {@code rms_norm} through
 * mcore4j's TorchScript module ({@code scripts/make_rms_norm_module.py}; DJL has no RMSNorm op),
 * which CUDA runs as fused kernels (an H200, [2048, 1, 4096] float16, forward and backward: 5 kernels
 * in 0.057 ms, against 31 kernels in 0.510 ms for the same function from elementary ops). Its weights are replicated over tensor-parallel ranks; with sequence
 * parallelism each rank sees a different slice of the sequence, so they are
 * {@link Parameter.Kind#SEQUENCE_PARALLEL} (gradients summed over TP before data-parallel averaging).
 * Every TP rank holds the same weights: rank 0's copy is the main replica in checkpoints.
 *
 * <p>With {@link TransformerConfig#layernormZeroCenteredGamma()} (Megatron's {@code --apply-layernorm-1p}) the
 * weight starts at 0 and scales by {@code 1 + weight}: RMSNorm through a second module of ours
 * ({@code scripts/make_zero_centered_rms_norm_module.py}, normalised and scaled in float32 as Gemma does),
 * LayerNorm with {@code 1 + weight} in the weight's dtype.
 */
public final class Norm extends AbstractModule implements UnaryModule {
    /** The RMSNorm module's resource, written by {@code scripts/make_rms_norm_module.py}. */
    public static final String RMS_NORM_RESOURCE = "/io/mcore4j/models/torchscript/rms_norm.pt";
    /** The zero-centred RMSNorm module's resource, written by {@code scripts/make_zero_centered_rms_norm_module.py}. */
    public static final String ZERO_CENTERED_RMS_NORM_RESOURCE = "/io/mcore4j/models/torchscript/zero_centered_rms_norm.pt";

    private final TransformerConfig.Normalization kind;
    private final double epsilon;
    private final Parameter weight;
    private final Parameter bias;
    /** Whether the weight is stored centred on zero and scales by {@code 1 + weight}. */
    private final boolean zeroCentered;
    /** RMSNorm's module and its epsilon as a 0-dim CPU float64 tensor; null for LayerNorm. */
    private final TorchScriptModule rmsNorm;
    private final NDArray rmsEpsilon;

    /**
     * @param ctx the model context (config, parameter manager, TP rank)
     * @param size normalised width
     */
    public Norm(ModelContext ctx, int size) {
        this(ctx, size, ctx.config().sequenceParallel());
    }

    /**
     * @param ctx the model context (config, parameter manager, TP rank)
     * @param size normalised width
     * @param differsOverTensorParallel each tensor-parallel rank normalises other activations with the
     *     same weights (a slice of the sequence under sequence parallelism, or its own attention heads for
     *     the query and key norms), so the weights' gradients are summed over the group
     */
    public Norm(ModelContext ctx, int size, boolean differsOverTensorParallel) {
        TransformerConfig c = ctx.config();
        this.kind = c.normalization();
        this.epsilon = c.normEpsilon();
        this.zeroCentered = c.layernormZeroCenteredGamma();
        int tpRank = ctx.groups().tensorParallelRank();
        Parameter.Kind paramKind = differsOverTensorParallel ? Parameter.Kind.SEQUENCE_PARALLEL : Parameter.Kind.DENSE;
        NDArray initial = zeroCentered ? DataTypes.zeros(ctx.parameters(), new Shape(size), c.dtype())
                : DataTypes.ones(ctx.parameters(), new Shape(size), c.dtype(), ctx.parameters().getDevice());
        this.weight = registerParameter("", new Parameter("weight", initial, Parameter.Partition.NONE, paramKind), tpRank);
        this.bias = kind == TransformerConfig.Normalization.LAYER_NORM
                ? registerParameter("", new Parameter("bias", DataTypes.zeros(ctx.parameters(), new Shape(size), c.dtype()),
                        Parameter.Partition.NONE, paramKind), tpRank)
                : null;
        if (kind == TransformerConfig.Normalization.LAYER_NORM) {
            this.rmsNorm = null;
            this.rmsEpsilon = null;
        } else {
            this.rmsNorm = TorchScriptModules.shared(Norm.class,
                    zeroCentered ? ZERO_CENTERED_RMS_NORM_RESOURCE : RMS_NORM_RESOURCE);
            this.rmsEpsilon = ctx.parameters().newSubManager(Device.cpu()).create(epsilon);
        }
    }

    /**
     * @param scope the pass's scope
     * @param x activations [..., size]
     * @return normalised activations in x's dtype
     */
    @Override
    public NDArray forward(AutogradScope scope, NDArray x) {
        if (kind == TransformerConfig.Normalization.LAYER_NORM) {
            if (!zeroCentered) {
                return layerNorm(scope, x, weight.data());
            }
            // libtorch's graph keeps 1 + weight for backward; its handle dies with the frame
            return scope.frame(() -> layerNorm(scope, x, Tensors.own(weight.data().add(Tensors.scalar(1, weight.data(),
                    scope.manager())), scope.manager())));
        }
        // libtorch's rms_norm squares and averages in float32, where x^2 cannot overflow
        return Tensors.own(rmsNorm.forward(new NDList(x, weight.data(), rmsEpsilon)).singletonOrThrow(), scope.manager());
    }

    /** libtorch's layer norm, which accumulates half-precision inputs in float32 internally: no casts needed. */
    private NDArray layerNorm(AutogradScope scope, NDArray x, NDArray gamma) {
        long width = x.getShape().get(x.getShape().dimension() - 1);
        // DJL gives the result x's manager: it belongs to the pass's current frame instead
        return Tensors.own(ai.djl.nn.norm.LayerNorm.layerNorm(x, new Shape(width), gamma, bias.data(), (float) epsilon)
                .get(0), scope.manager());
    }
}
