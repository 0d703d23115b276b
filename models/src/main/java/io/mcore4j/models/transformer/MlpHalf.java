package io.mcore4j.models.transformer;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import ai.djl.nn.Activation;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.TorchScriptModule;
import io.mcore4j.core.TorchScriptModules;
import io.mcore4j.core.WeightGradients;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.autograd.Function;
import io.mcore4j.core.autograd.FunctionContext;
import io.mcore4j.core.fp8.Fp8Linear;
import io.mcore4j.core.kernel.BiasGradientKernel;
import io.mcore4j.core.kernel.LayerNormKernel;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.PendingCollective;
import io.mcore4j.parallel.ReduceOp;

/**
 * The second half of a pre-norm GPT layer, {@code h + fc2(gelu(fc1(LN(h))))}
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
 * <p><b>FP8.</b> Where the layer's fc1 and fc2 were built with FP8 GEMMs, the half multiplies through those
 * {@link Fp8Linear}s ({@link Fp8Linear#forward2d}, {@link Fp8Linear#backward2d}: the same casts, scaling slots and
 * weight cache as the composed half) and keeps their transposed float8 inputs for backward instead of the LayerNorm's
 * and the GELU's outputs; the weights' gradients are added into an existing {@code .grad} after their GEMM.
 *
 * <p><b>Tensor parallelism</b> (without sequence parallelism): with a group of more than one rank, fc1 is this rank's
 * column shard ({@code [F/t, H]}, its bias {@code [F/t]}) and fc2 its row shard ({@code [H, F/t]}, the bias whole),
 * as {@code ColumnParallelLinear} and {@code RowParallelLinear} hold them: forward sums fc2's partial products, each
 * with the bias share {@code b/t} from its GEMM, over the group before the residual (the row-parallel linear's
 * all-reduce); backward sums the LayerNorm output's partial gradients before the LayerNorm's backward (the
 * column-parallel linear's), started before fc1's weight gradient and awaited after it
 * ({@link Communicator#startAllReduceInPlace}). The LayerNorm's and fc2 bias's gradients are then the same on every
 * rank, as with the composed linears.
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
    private final Fp8Linear fc1Fp8;
    private final Fp8Linear fc2Fp8;
    /** The tensor-parallel group of more than one rank, or null: one rank. */
    private final Communicator tp;

    /**
     * @param epsilon LayerNorm's epsilon as a 0-dim CPU float64 tensor, owned by the caller
     * @param kernel the device's bias-gradient kernel, or null to compose the same values
     * @param normKernel the device's LayerNorm kernel (its forward, and the half's input gradient in one pass with
     *     the residual's), or null for libtorch's LayerNorm forward, backward and an add
     * @param fc1Fp8 fc1's FP8 GEMMs, or null (with {@code fc2Fp8}) to multiply in the parameters' dtype
     * @param fc2Fp8 fc2's FP8 GEMMs, or null
     * @param tp the tensor-parallel group (see the class comment; FP8 needs one rank), or null for one rank
     * @param parameters the half's six parameters in input order (LN weight, LN bias, fc1 weight, fc1
     *     bias, fc2 weight, fc2 bias); their leaves are read at each {@link #apply} and backward
     */
    MlpHalf(NDArray epsilon, BiasGradientKernel kernel, LayerNormKernel normKernel, Fp8Linear fc1Fp8, Fp8Linear fc2Fp8,
            Communicator tp, Parameter... parameters) {
        if (parameters.length != 6) {
            throw new IllegalArgumentException("the MLP half has 6 parameters, got " + parameters.length);
        }
        if ((fc1Fp8 == null) != (fc2Fp8 == null)) {
            throw new IllegalArgumentException("the MLP half multiplies both linears in FP8 or neither; fc1 "
                    + (fc1Fp8 == null ? "has none" : "has FP8 GEMMs") + ", fc2 " + (fc2Fp8 == null ? "has none" : "has FP8 GEMMs"));
        }
        this.tp = tp == null || tp.size() == 1 ? null : tp;
        if (this.tp != null && fc1Fp8 != null) {
            throw new IllegalArgumentException("the MLP half multiplies in FP8 at one tensor-parallel rank only, not "
                    + tp.size());
        }
        this.fc1Fp8 = fc1Fp8;
        this.fc2Fp8 = fc2Fp8;
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
            in[i + 1] = scope.parameterInput(leaf);
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
            if (fc1Fp8 != null) {
                return new NDArray[] {forwardFp8(ctx, h, norm, in, temp)};
            }
            NDArray h1 = Tensors.linear(normed, in[3], in[4], m);
            NDArray a = Tensors.own(Activation.gelu(h1), m);
            NDArray out;
            if (tp == null) {
                out = Tensors.own(h.add(Tensors.linear(a, in[5], in[6], temp)), m);
            } else {
                // the row-parallel linear: each rank's partial product carries b/t from its GEMM (RowParallelLinear's
                // bias share), so the sum over the group holds the bias once; adding the bias after the sum would be a
                // broadcast add, which libtorch runs unvectorised (44 us a layer pass on the 1.3B model at TP2)
                NDArray share = Tensors.scale(in[6], 1.0 / tp.size(), temp);
                NDArray y = tp.allReduce(Tensors.linear(a, in[5], share, temp), ReduceOp.SUM, temp);
                out = Tensors.own(h.add(y), m);
            }
            ctx.saveForBackward(h, norm[1], norm[2], h1, in[1], in[2], in[3], in[4], in[5], in[6], normed, a);
            return new NDArray[] {out};
        }
    }

    /**
     * The forward with fc1 and fc2 in FP8: saves the common tensors, then what the two linears keep (their transposed
     * float8 inputs) in place of the LayerNorm's and the GELU's outputs.
     */
    private NDArray forwardFp8(FunctionContext ctx, NDArray h, NDArray[] norm, NDArray[] in, NDManager temp) {
        NDManager m = ctx.manager();
        Shape shape = h.getShape();
        long width = shape.get(shape.dimension() - 1);
        Fp8Linear.Saved[] fc1 = new Fp8Linear.Saved[1];
        Fp8Linear.Saved[] fc2 = new Fp8Linear.Saved[1];
        NDArray normed2 = Tensors.own(norm[0].reshape(-1, width), temp);
        NDArray h1 = Tensors.own(fc1Fp8.forward2d(normed2, parameters[2], in[3], in[4], temp, fc1), m);
        norm[0].close();
        NDArray a = Tensors.own(Activation.gelu(h1), temp);
        NDArray y = fc2Fp8.forward2d(a, parameters[4], in[5], in[6], temp, fc2);
        a.close();
        NDArray out = Tensors.own(h.add(Tensors.own(y.reshape(shape), temp)), m);
        fc1[0].inputT().attach(m);
        fc1[0].inputInverse().attach(m);
        fc2[0].inputT().attach(m);
        fc2[0].inputInverse().attach(m);
        NDArray[] saved = new NDArray[18];
        NDArray[] common = {h, norm[1], norm[2], h1, in[1], in[2], in[3], in[4], in[5], in[6]};
        System.arraycopy(common, 0, saved, 0, common.length);
        System.arraycopy(fc1[0].tensors(), 0, saved, FP8_SAVED, 4);
        System.arraycopy(fc2[0].tensors(), 0, saved, FP8_SAVED + 4, 4);
        ctx.saveForBackward(saved);
        return out;
    }

    /** Where the saved tensors of the FP8 forward's two linears begin (after the ten both forwards save). */
    private static final int FP8_SAVED = 10;

    @Override
    public NDArray[] backward(FunctionContext ctx, NDArray... gradOutputs) {
        NDManager m = ctx.manager();
        NDArray dy = gradOutputs[0];
        NDArray h = ctx.saved(0);
        NDArray mean = ctx.saved(1);
        NDArray rstd = ctx.saved(2);
        NDArray h1 = ctx.saved(3);
        NDArray lnWeight = ctx.saved(4);
        NDArray lnBias = ctx.saved(5);
        NDArray w1 = ctx.saved(6);
        NDArray b1 = ctx.saved(7);
        NDArray w2 = ctx.saved(8);
        NDArray b2 = ctx.saved(9);
        long width = h.getShape().get(h.getShape().dimension() - 1);
        long ffn = h1.getShape().get(h1.getShape().dimension() - 1);
        try (NDManager temp = m.newSubManager()) {
            NDArray dy2 = Tensors.own(dy.reshape(-1, width), temp);
            // fc2: weight, bias, input gradients
            NDArray[] dW2 = new NDArray[1];
            NDArray da2 = linearBackward(ctx, fc2Fp8, FP8_SAVED + 4, 11, 5, dy2, w2, dW2, temp);
            NDArray db2 = gradient(ctx, 6, columnSum(dy, b2, temp), temp);
            NDArray da = Tensors.own(da2.reshape(h1.getShape()), temp);
            // GELU and fc1's bias
            NDArray[] gelu = kernel == null ? null : kernel.geluBackward(h1, da, temp);
            if (gelu == null) {
                NDList out = module("gelu_backward.pt").forward(new NDList(h1, da));
                out.attach(temp);
                gelu = new NDArray[] {out.get(0), out.get(1)};
            }
            h1.close();
            NDArray dh1 = Tensors.own(gelu[0].reshape(-1, ffn), temp);
            NDArray db1 = gradient(ctx, 4, Tensors.own(DataTypes.toType(gelu[1], DataTypes.of(b1), false), temp), temp);
            // fc1: weight and input gradients
            NDArray[] dW1 = new NDArray[1];
            NDArray dNormed;
            if (tp == null) {
                dNormed = Tensors.own(linearBackward(ctx, fc1Fp8, FP8_SAVED, 10, 3, dh1, w1, dW1, temp)
                        .reshape(h.getShape()), temp);
            } else {
                // the column-parallel linear's input gradient: partial products summed over the group, the sum
                // started before fc1's weight gradient and awaited after it (as OverlappedColumnLinear does)
                NDArray partial = Tensors.own(Tensors.own(dh1.matMul(w1), temp).reshape(h.getShape()), temp);
                PendingCollective sum = tp.startAllReduceInPlace(partial, ReduceOp.SUM);
                NDArray x = ctx.saved(10);
                dW1[0] = weightGradient(ctx, 3, dh1, Tensors.own(x.reshape(-1, width), temp), temp);
                x.close();
                dNormed = sum.await();
            }
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
            NDArray dLnWeight = gradient(ctx, 1, norm.get(0), temp);
            NDArray dLnBias = gradient(ctx, 2, norm.get(1), temp);
            return new NDArray[] {dh, dLnWeight, dLnBias, dW1[0], db1, dW2[0], db2};
        }
    }

    /**
     * One linear's backward: {@code dOut·W}, returned (owned by {@code temp}), and the weight's gradient, added into its
     * {@code .grad} or left in {@code dW[0]}. In FP8 through the linear's GEMMs on what its forward saved from
     * {@code fp8Saved} on; else in the parameters' dtype from its input saved at {@code inputSaved}. Frees the saved
     * input.
     */
    private NDArray linearBackward(FunctionContext ctx, Fp8Linear fp8, int fp8Saved, int inputSaved, int weightInput,
                                   NDArray dOut, NDArray w, NDArray[] dW, NDManager temp) {
        if (fp8 != null) {
            Fp8Linear.Saved saved = Fp8Linear.Saved.from(ctx, fp8Saved);
            NDArray[] g = fp8.backward2d(dOut, saved, temp);
            saved.inputT().close();
            dW[0] = gradient(ctx, weightInput, g[1], temp);
            return g[0];
        }
        NDArray x = ctx.saved(inputSaved);
        long width = x.getShape().get(x.getShape().dimension() - 1);
        dW[0] = weightGradient(ctx, weightInput, dOut, Tensors.own(x.reshape(-1, width), temp), temp);
        x.close();
        return Tensors.own(dOut.matMul(w), temp);
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
            WeightGradients.addInto(grad, dOut, x);
            return null;
        }
        return Tensors.own(dOut.transpose().matMul(x), ctx.manager());
    }

    /**
     * {@code g} (owned by {@code temp}) as the gradient of input {@code input}: added in place into the
     * parameter's {@code .grad} where it has one (then null), else handed to the context's manager.
     */
    private NDArray gradient(FunctionContext ctx, int input, NDArray g, NDManager temp) {
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
