package io.mcore4j.models.transformer;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.nn.Activation;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.TorchScriptModule;
import io.mcore4j.core.TorchScriptModule.Arg;
import io.mcore4j.core.TorchScriptModules;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.autograd.Function;
import io.mcore4j.core.autograd.FunctionContext;
import io.mcore4j.core.kernel.BiasGradientKernel;
import io.mcore4j.core.kernel.LayerNormKernel;
import io.mcore4j.core.nn.Parameter;

/**
 * The second half of a pre-norm GPT layer at one tensor-parallel rank, {@code h + fc2(gelu(fc1(LN(h))))}
 * (LayerNorm, exact GELU, biases, no dropout), as one Function whose backward is written out: the
 * GEMMs through libtorch as autograd would run them, the LayerNorm through libtorch's own backward,
 * and the bias gradients with a {@link BiasGradientKernel} where the device has one (the GELU's
 * backward and the bias before it in one pass, the bias after it in one pass; libtorch takes a GELU
 * pass and a reduction per bias), and the LayerNorm's forward and the input gradient (LayerNorm's plus the
 * residual's) with a {@link LayerNormKernel} where the device has one (one read of each row; libtorch writes
 * the LayerNorm's input gradient, then adds). Its input is the half's input {@code h}, so the layer's attention
 * half below is still back-propagated once. The forward runs the same libtorch ops as the composed
 * half and saves the same tensors; the backward frees each saved tensor once used.
 *
 * <p><b>Parameter gradients</b> (Megatron's gradient-accumulation fusion, in the parameters' own
 * {@code .grad}): where a parameter already has a gradient (the second and later micro-batches of a
 * step, or gradients zeroed in place), the backward adds into it in place, a weight's in its GEMM
 * ({@code addmm_}: no separate gradient tensor and no add), and hands autograd nothing for it.
 * Where it has none, the gradient is returned as usual; the parameters enter {@link #apply} as
 * aliases (views) of their leaves, so that libtorch's accumulation receives a tensor nothing else
 * refers to and keeps it as {@code .grad} instead of copying it (a tensor handed to autograd from
 * Java is still referenced there). The sums are those of autograd up to rounding: a weight's
 * increment is added before it is rounded to the gradient's dtype.
 *
 * <p>Inputs: {@code h, LN weight, LN bias, fc1 weight [F, H], fc1 bias, fc2 weight [H, F], fc2 bias}. The
 * gradient of {@code h} is a new tensor that nothing else refers to (the layer relies on it: see
 * {@link TransformerLayer}'s residual operand).
 */
final class MlpHalf implements Function {
    private final NDArray epsilon;
    private final double epsilonValue;
    private final BiasGradientKernel kernel;
    private final LayerNormKernel normKernel;
    private final Parameter[] parameters;

    /**
     * @param epsilon LayerNorm's epsilon as a 0-dim CPU float64 tensor, owned by the caller
     * @param kernel the device's bias-gradient kernel, or null to compose the same values
     * @param normKernel the device's LayerNorm kernel (its forward, and the half's input gradient in one pass with
     *     the residual's), or null for libtorch's LayerNorm forward, backward and an add
     * @param parameters the half's six parameters in input order (LN weight, LN bias, fc1 weight, fc1
     *     bias, fc2 weight, fc2 bias); their leaves are read at each {@link #apply} and backward
     */
    MlpHalf(NDArray epsilon, BiasGradientKernel kernel, LayerNormKernel normKernel, Parameter... parameters) {
        if (parameters.length != 6) {
            throw new IllegalArgumentException("the MLP half has 6 parameters, got " + parameters.length);
        }
        this.epsilon = epsilon;
        this.epsilonValue = epsilon.getDouble();
        this.kernel = kernel;
        this.normKernel = normKernel;
        this.parameters = parameters.clone();
    }

    /**
     * Applies the half to {@code h} in {@code scope}; with grad mode on, the parameters enter as
     * aliases of their leaves (see the class comment).
     *
     * @param scope the pass's scope
     * @param h the half's input [s, b, H]
     * @return {@code h + fc2(gelu(fc1(LN(h))))}
     */
    NDArray apply(AutogradScope scope, NDArray h) {
        NDArray[] in = new NDArray[7];
        in[0] = h;
        for (int i = 0; i < parameters.length; i++) {
            NDArray leaf = parameters[i].data();
            in[i + 1] = scope.isGradEnabled() ? Tensors.own(leaf.reshape(leaf.getShape()), scope.manager()) : leaf;
        }
        return scope.apply1(this, in);
    }

    @Override
    public NDArray[] forward(FunctionContext ctx, NDArray... in) {
        NDManager m = ctx.manager();
        NDArray h = in[0];
        try (NDManager temp = m.newSubManager()) {
            NDArray[] norm = normKernel == null ? null : normKernel.forward(h, in[1], in[2], epsilonValue, m);
            if (norm == null) {
                NDList composed = module("layer_norm_forward.pt").forward(new NDList(h, in[1], in[2], epsilon));
                composed.attach(m);
                norm = composed.toArray(new NDArray[0]);
            }
            NDArray normed = norm[0];
            NDArray h1 = Tensors.linear(normed, in[3], in[4], m);
            NDArray a = Tensors.own(Activation.gelu(h1), m);
            NDArray y = Tensors.linear(a, in[5], in[6], temp);
            NDArray out = Tensors.own(h.add(y), m);
            ctx.saveForBackward(h, norm[1], norm[2], normed, h1, a, in[1], in[2], in[3], in[4], in[5], in[6]);
            return new NDArray[] {out};
        }
    }

    @Override
    public NDArray[] backward(FunctionContext ctx, NDArray... gradOutputs) {
        NDManager m = ctx.manager();
        NDArray dy = gradOutputs[0];
        NDArray h = ctx.saved(0);
        NDArray mean = ctx.saved(1);
        NDArray rstd = ctx.saved(2);
        NDArray normed = ctx.saved(3);
        NDArray h1 = ctx.saved(4);
        NDArray a = ctx.saved(5);
        NDArray lnWeight = ctx.saved(6);
        NDArray lnBias = ctx.saved(7);
        NDArray w1 = ctx.saved(8);
        NDArray b1 = ctx.saved(9);
        NDArray w2 = ctx.saved(10);
        NDArray b2 = ctx.saved(11);
        long width = h.getShape().get(h.getShape().dimension() - 1);
        long ffn = h1.getShape().get(h1.getShape().dimension() - 1);
        try (NDManager temp = m.newSubManager()) {
            NDArray dy2 = Tensors.own(dy.reshape(-1, width), temp);
            // fc2: weight, bias, input gradients
            NDArray dW2 = weightGradient(ctx, 5, dy2, Tensors.own(a.reshape(-1, ffn), temp), temp);
            NDArray db2 = vectorGradient(ctx, 6, columnSum(dy, b2, temp), temp);
            a.close();
            NDArray da = Tensors.own(Tensors.own(dy2.matMul(w2), temp).reshape(h1.getShape()), temp);
            // GELU and fc1's bias
            NDArray[] gelu = kernel == null ? null : kernel.geluBackward(h1, da, temp);
            if (gelu == null) {
                NDList out = module("gelu_backward.pt").forward(new NDList(h1, da));
                out.attach(temp);
                gelu = new NDArray[] {out.get(0), out.get(1)};
            }
            h1.close();
            NDArray dh1 = Tensors.own(gelu[0].reshape(-1, ffn), temp);
            NDArray db1 = vectorGradient(ctx, 4, Tensors.own(DataTypes.toType(gelu[1], DataTypes.of(b1), false), temp), temp);
            // fc1: weight and input gradients
            NDArray dW1 = weightGradient(ctx, 3, dh1, Tensors.own(normed.reshape(-1, width), temp), temp);
            normed.close();
            NDArray dNormed = Tensors.own(Tensors.own(dh1.matMul(w1), temp).reshape(h.getShape()), temp);
            // LayerNorm and the residual: the input gradient in one pass with the residual's where a kernel can
            NDArray dh = normKernel == null ? null : normKernel.inputGradientPlus(dNormed, h, mean, rstd, lnWeight, dy, m);
            NDList norm;
            if (dh != null) {
                norm = module("layer_norm_weight_backward.pt").forward(new NDList(dNormed, h, mean, rstd, lnWeight, lnBias));
                norm.attach(temp);
            } else {
                NDList all = module("layer_norm_backward.pt").forward(new NDList(dNormed, h, mean, rstd, lnWeight, lnBias));
                all.attach(temp);
                dh = Tensors.own(dy.add(all.get(0)), m);
                norm = new NDList(all.get(1), all.get(2));
            }
            NDArray dLnWeight = vectorGradient(ctx, 1, norm.get(0), temp);
            NDArray dLnBias = vectorGradient(ctx, 2, norm.get(1), temp);
            return new NDArray[] {dh, dLnWeight, dLnBias, dW1, db1, dW2, db2};
        }
    }

    /** The gradient of a bias from its layer's output gradient: column sums in the bias's dtype, owned by {@code temp}. */
    private NDArray columnSum(NDArray dy, NDArray bias, NDManager temp) {
        NDArray sums = kernel == null ? null : kernel.columnSum(dy, temp);
        if (sums == null) {
            long width = dy.getShape().get(dy.getShape().dimension() - 1);
            return Tensors.own(Tensors.own(dy.reshape(-1, width), temp).sum(new int[] {0}), temp);
        }
        return Tensors.own(DataTypes.toType(sums, DataTypes.of(bias), false), temp);
    }

    /**
     * The gradient {@code dOut^T · x} of the weight that is input {@code input}: added in place into the
     * parameter's {@code .grad} where it has one (then null), else a new tensor owned by the context.
     */
    private NDArray weightGradient(FunctionContext ctx, int input, NDArray dOut, NDArray x, NDManager temp) {
        if (!ctx.needsInputGrad(input)) {
            return null;
        }
        NDArray grad = existingGradient(input, dOut, temp);
        if (grad != null) {
            module("accumulate_weight_gradient.pt").call(Arg.tensor(grad), Arg.tensor(dOut), Arg.tensor(x));
            return null;
        }
        return Tensors.own(dOut.transpose().matMul(x), ctx.manager());
    }

    /**
     * {@code g} (owned by {@code temp}) as the gradient of input {@code input}: added in place into the
     * parameter's {@code .grad} where it has one (then null), else handed to the context's manager.
     */
    private NDArray vectorGradient(FunctionContext ctx, int input, NDArray g, NDManager temp) {
        if (!ctx.needsInputGrad(input)) {
            return null;
        }
        NDArray grad = existingGradient(input, g, temp);
        if (grad != null) {
            grad.addi(g);
            return null;
        }
        return Tensors.own(g, ctx.manager());
    }

    /** The {@code .grad} of the parameter behind input {@code input} when it has one of {@code like}'s dtype, else null. */
    private NDArray existingGradient(int input, NDArray like, NDManager temp) {
        NDArray grad = Tensors.gradientOrNull(parameters[input - 1].data(), temp);
        return grad != null && DataTypes.of(grad) == DataTypes.of(like) ? grad : null;
    }

    @Override
    public String name() {
        return "mlp-half";
    }

    /** A module of libtorch ops DJL does not expose ({@code scripts/make_mlp_half_modules.py}), shared by the process. */
    private static TorchScriptModule module(String name) {
        return TorchScriptModules.shared(MlpHalf.class, "/io/mcore4j/models/torchscript/" + name);
    }
}
