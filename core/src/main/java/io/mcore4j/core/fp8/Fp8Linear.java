package io.mcore4j.core.fp8;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.TensorMemory;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.autograd.Function;
import io.mcore4j.core.autograd.FunctionContext;
import io.mcore4j.core.nn.Parameter;

import java.util.Objects;

/**
 * One linear layer's local GEMMs in FP8, {@code y = x·Wᵀ (+ b)}: the second implementation of the linear that
 * {@link io.mcore4j.core.Tensors#linear} composes in the parameter dtype, with the same autograd contract. Forward
 * casts the input to e4m3 and multiplies it by the weight's e4m3 copy; backward casts the output gradient
 * (e5m2 under {@link Fp8Format#HYBRID}, e4m3 otherwise) and computes {@code dx = dy·W} and {@code dW = dyᵀ·x} on
 * float8 operands; each cast writes the operand's transposed copy too, the layout the other GEMM takes
 * ({@link Fp8Kernels} casts with a fused kernel where the device has one); {@code db = Σ dy} in the gradient's dtype. Every GEMM accumulates in float32 and writes the
 * input's dtype ({@link Fp8Kernels} chooses {@code _scaled_mm} or its float32 reference). The scales come from
 * the linear's three slots of an {@link Fp8Scaling}.
 *
 * <p><b>The weight cache.</b> The weight is cast once per {@link Fp8Scaling#generation() generation}, with its
 * transposed copy for the input gradient, and again only when the generation or the {@link Parameter} changes.
 * The generation is the version of the weights' values: it moves when the optimizer writes them
 * ({@link Fp8Scaling#update}, once per step) and when a checkpoint is written into them in place
 * ({@link Fp8Scaling#loadShardedState}). The key is the parameter, not its tensor handle: the handle is renewed
 * whenever the gradient is set to none ({@link Parameter#clearGradient()}, every micro-batch under ZeRO-2/3) and
 * under ZeRO-3 the storage is gathered afresh for every read, while the values stay those of the generation. The
 * transposed float8 copy of each application's input is kept for backward instead of the input (half the bytes of
 * bf16). The cached copies are owned by this object and closed with it. Under delayed scaling with the device's fused
 * cast, a new generation of the same parameter is cast into the copies already cached (the inverse scale is a view of
 * the scaling state's buffer), so their memory stays where a captured CUDA graph reads and writes it.
 *
 * <p>The input's last dim, the output dim and the token count (the product of the input's other dims) must be
 * multiples of 16 ({@code _scaled_mm}'s constraint, checked on every device so that a layout that trains on the
 * CPU also runs on the GPU). Not thread-safe: one training thread per model.
 */
public final class Fp8Linear implements AutoCloseable {
    /** The granularity {@code _scaled_mm} needs of every GEMM dim. */
    public static final int ALIGNMENT = 16;

    private final String name;
    private final Fp8Scaling scaling;
    private final Fp8Scaling.Slots slots;
    private final NDManager manager;
    private CachedWeight cached;
    private NDArray forwardConfig;
    private NDArray weightConfig;
    private NDArray backwardConfig;
    private DataType configType;
    private NDArray noBias;

    /**
     * @param name the linear's name (in errors and as its slots' prefix)
     * @param scaling the model's scaling state; this linear registers its three slots there
     * @param manager a long-lived manager on the weights' device, for the cached weight copies
     */
    public Fp8Linear(String name, Fp8Scaling scaling, NDManager manager) {
        this.name = Objects.requireNonNull(name, "name");
        this.scaling = Objects.requireNonNull(scaling, "scaling");
        this.slots = scaling.register(name);
        this.manager = manager.newSubManager();
        this.manager.setName("fp8-linear " + name);
    }

    /**
     * Checks a layer's GEMM dims once, when it is built.
     *
     * @param layer the layer's name
     * @param inputSize this rank's input dim
     * @param outputSize this rank's output dim
     * @throws IllegalArgumentException naming the dim that is not a multiple of 16
     */
    public static void checkDims(String layer, long inputSize, long outputSize) {
        if (inputSize % ALIGNMENT != 0 || outputSize % ALIGNMENT != 0) {
            throw new IllegalArgumentException(layer + ": FP8 GEMMs need dims that are multiples of " + ALIGNMENT
                    + "; this rank's weight is [" + outputSize + ", " + inputSize + "]");
        }
    }

    /** @return this linear's slots in the scaling state */
    public Fp8Scaling.Slots slots() {
        return slots;
    }

    /**
     * Applies the linear under {@code scope}.
     *
     * @param scope the pass's scope; owns the output
     * @param x {@code [.., in]} in float32, float16 or bfloat16
     * @param weight the {@code [out, in]} parameter (its gradient is accumulated by autograd, the first one kept
     *     without a copy: {@link AutogradScope#parameterInput}); its float8 copy is cached for the current generation
     *     (the class comment's weight cache)
     * @param bias {@code [out]} or null
     * @return {@code [.., out]} in {@code x}'s dtype
     * @throws IllegalArgumentException if a dim is not a multiple of 16 or the dtype is not supported
     */
    public NDArray apply(AutogradScope scope, NDArray x, Parameter weight, NDArray bias) {
        Gemms gemms = new Gemms(weight);
        NDArray w = scope.parameterInput(weight.data());
        return bias == null ? scope.apply1(gemms, x, w) : scope.apply1(gemms, x, w, scope.parameterInput(bias));
    }

    private void configure(DataType outType, boolean scaledMm) {
        if (outType == configType) {
            return;
        }
        boolean current = scaling.config().recipe() == Fp8Recipe.TENSORWISE;
        forwardConfig = Fp8Kernels.config(manager, slots.input(), false, current, scaledMm, outType);
        weightConfig = Fp8Kernels.config(manager, slots.weight(), false, current, scaledMm, outType);
        backwardConfig = Fp8Kernels.config(manager, slots.gradOutput(), scaling.e5m2(slots.gradOutput()), current,
                scaledMm, outType);
        configType = outType;
    }

    /** @return the empty tensor the forward GEMM takes for "no bias", made once */
    private NDArray noBias() {
        if (noBias == null) {
            noBias = manager.zeros(new Shape(0), DataType.FLOAT32);
        }
        return noBias;
    }

    private CachedWeight weight(Parameter source, NDArray w) {
        long generation = scaling.generation();
        if (cached != null && cached.generation == generation && cached.source == source) {
            return cached;
        }
        if (cached != null && cached.source == source && cached.q.getShape().equals(w.getShape())
                && Fp8Kernels.get().quantizeInto(w, scaling, slots.weight(), cached.q, cached.qT)) {
            // a new generation of the same parameter, cast where the last one lies: a CUDA graph that captured the
            // cast (and the GEMMs reading the copies) keeps valid addresses, whether it or an eager pass casts next
            cached = new CachedWeight(source, generation, cached.q, cached.qT, cached.inverseScale);
            scaling.countWeightCast();
            return cached;
        }
        if (cached != null) {
            cached.close();
        }
        Fp8Kernels.Quantized q = Fp8Kernels.get().quantize(w, scaling, slots.weight(), weightConfig);
        q.q().attach(manager);
        q.qT().attach(manager);
        q.inverseScale().attach(manager);
        cached = new CachedWeight(source, generation, q.q(), q.qT(), q.inverseScale());
        scaling.countWeightCast();
        return cached;
    }

    /** Closes the cached weight copies. */
    @Override
    public void close() {
        manager.close();
        cached = null;
    }

    @Override
    public String toString() {
        return "fp8-linear " + name + " " + slots;
    }

    /** The float8 weight of one generation: {@code [out, in]}, its transpose {@code [in, out]} and inverse scale. */
    private record CachedWeight(Parameter source, long generation, NDArray q, NDArray qT, NDArray inverseScale) {
        void close() {
            q.close();
            qT.close();
            inverseScale.close();
        }
    }

    /**
     * What {@link #forward2d} keeps for {@link #backward2d}: the transposed float8 input and the cached transposed
     * float8 weight, with their inverse scales.
     *
     * @param inputT {@code [in, tokens]} float8, owned by the forward's owner
     * @param inputInverse its 0-dim float32 inverse scale
     * @param weightT {@code [in, out]} float8, owned by this linear's cache
     * @param weightInverse its 0-dim float32 inverse scale
     */
    public record Saved(NDArray inputT, NDArray inputInverse, NDArray weightT, NDArray weightInverse) {
        /** @return the four tensors in this order, for {@link FunctionContext#saveForBackward} */
        public NDArray[] tensors() {
            return new NDArray[] {inputT, inputInverse, weightT, weightInverse};
        }

        /**
         * @param ctx a function's context
         * @param first the index of {@link #inputT} among its saved tensors
         * @return the four tensors saved from {@code first} on
         */
        public static Saved from(FunctionContext ctx, int first) {
            return new Saved(ctx.saved(first), ctx.saved(first + 1), ctx.saved(first + 2), ctx.saved(first + 3));
        }
    }

    /**
     * The forward GEMM {@code y = x·Wᵀ (+ b)} on a 2-D input, outside autograd: for a Function that writes its own
     * backward around this linear's GEMMs (the MLP half) and for {@link #apply}. Casts {@code x} in the input slot and
     * reads the weight cache.
     *
     * @param x2 {@code [tokens, in]} float32, float16 or bfloat16, tokens a multiple of 16
     * @param weight the weight parameter (the cache's key)
     * @param w its current tensor {@code [out, in]}
     * @param bias {@code [out]} or null
     * @param owner owns the output and the saved transposed input
     * @param saved receives what {@link #backward2d} needs (element 0 is set)
     * @return {@code [tokens, out]} in {@code x2}'s dtype
     * @throws IllegalArgumentException if a dim is not a multiple of 16 or the dtype is not supported
     */
    public NDArray forward2d(NDArray x2, Parameter weight, NDArray w, NDArray bias, NDManager owner, Saved[] saved) {
        DataType type = DataTypes.of(x2);
        if (!Fp8Kernels.supportedOutput(type)) {
            throw new IllegalArgumentException(name + ": FP8 linear input of dtype " + type
                    + "; expected float32, float16 or bfloat16");
        }
        long tokens = x2.getShape().get(0);
        long in = x2.getShape().get(1);
        long out = w.getShape().get(0);
        if (tokens % ALIGNMENT != 0) {
            throw new IllegalArgumentException(name + ": FP8 GEMMs need a token count (the input's dims but the last)"
                    + " that is a multiple of " + ALIGNMENT + "; the input has " + tokens);
        }
        checkDims(name, in, out);
        Fp8Kernels kernels = Fp8Kernels.get();
        configure(type, kernels.scaledMm(x2.getDevice()));
        CachedWeight cw = weight(weight, w);
        try (NDManager temp = owner.newSubManager()) {
            NDArray x = TensorMemory.contiguous(x2, temp);
            Fp8Kernels.Quantized qx = kernels.quantize(x, scaling, slots.input(), forwardConfig);
            NDArray y2 = kernels.forward(qx.q(), cw.q(), qx.inverseScale(), cw.inverseScale(), bias == null ? noBias() : bias,
                    forwardConfig);
            y2.attach(owner);
            // the row-major copy served the forward GEMM; backward multiplies the transposed one
            qx.q().close();
            qx.qT().attach(owner);
            qx.inverseScale().attach(owner);
            saved[0] = new Saved(qx.qT(), qx.inverseScale(), cw.qT(), cw.inverseScale());
            return y2;
        }
    }

    /**
     * The two backward GEMMs of {@link #forward2d}, outside autograd: casts {@code dy2} in the output-gradient slot,
     * then {@code dx = dy·W} and {@code dW = dyᵀ·x} on float8 operands.
     *
     * @param dy2 {@code [tokens, out]}
     * @param saved what the forward kept
     * @param owner owns the two results
     * @return {@code {dx [tokens, in], dW [out, in]}} in {@code dy2}'s dtype
     */
    public NDArray[] backward2d(NDArray dy2, Saved saved, NDManager owner) {
        Fp8Kernels kernels = Fp8Kernels.get();
        try (NDManager temp = owner.newSubManager()) {
            Fp8Kernels.Quantized qdy = kernels.quantize(TensorMemory.contiguous(dy2, temp), scaling, slots.gradOutput(),
                    backwardConfig);
            NDList g = kernels.backward(qdy.q(), qdy.qT(), qdy.inverseScale(), saved.inputT(), saved.inputInverse(),
                    saved.weightT(), saved.weightInverse(), backwardConfig);
            g.attach(owner);
            qdy.q().close();
            qdy.qT().close();
            qdy.inverseScale().close();
            return new NDArray[] {g.get(0), g.get(1)};
        }
    }

    /** The forward GEMM and the two backward GEMMs; the weight cache is read at forward. */
    private final class Gemms implements Function {
        private final Parameter weight;

        Gemms(Parameter weight) {
            this.weight = weight;
        }

        @Override
        public NDArray[] forward(FunctionContext ctx, NDArray... inputs) {
            NDArray x = inputs[0];
            Shape shape = x.getShape();
            long in = shape.get(shape.dimension() - 1);
            NDManager owner = ctx.manager();
            Saved[] saved = new Saved[1];
            NDArray y2;
            try (NDManager temp = owner.newSubManager()) {
                NDArray x2 = x.reshape(-1, in);
                x2.attach(temp);
                y2 = forward2d(x2, weight, inputs[1], inputs.length > 2 ? inputs[2] : null, owner, saved);
            }
            long out = y2.getShape().get(1);
            long[] dims = shape.getShape().clone();
            dims[dims.length - 1] = out;
            NDArray y = y2.reshape(new Shape(dims));
            y.attach(owner);
            ctx.saveForBackward(saved[0].tensors());
            ctx.setState(new long[] {in, out});
            return new NDArray[] {y};
        }

        @Override
        public NDArray[] backward(FunctionContext ctx, NDArray... grads) {
            long[] dims = ctx.state(long[].class);
            NDManager owner = ctx.manager();
            NDArray dy = grads[0];
            Shape shape = dy.getShape();
            NDArray dy2 = dy.reshape(-1, dims[1]);
            dy2.attach(owner);
            NDArray[] g = backward2d(dy2, Saved.from(ctx, 0), owner);
            NDArray[] result = new NDArray[ctx.inputCount()];
            if (ctx.needsInputGrad(0)) {
                long[] xd = shape.getShape().clone();
                xd[xd.length - 1] = dims[0];
                result[0] = g[0].reshape(new Shape(xd));
                result[0].attach(owner);
            }
            g[0].close();
            if (ctx.needsInputGrad(1)) {
                result[1] = g[1];
            } else {
                g[1].close();
            }
            if (ctx.inputCount() > 2 && ctx.needsInputGrad(2)) {
                result[2] = dy2.sum(new int[] {0});
                result[2].attach(owner);
            }
            return result;
        }

        @Override
        public String name() {
            return "fp8-linear " + name;
        }
    }
}
