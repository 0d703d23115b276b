package io.mcore4j.core.fp8;

import ai.djl.Device;
import ai.djl.engine.EngineException;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.GraphOptimization;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.TorchScriptModule;
import io.mcore4j.core.TorchScriptModules;
import io.mcore4j.core.kernel.Fp8CastKernel;
import io.mcore4j.core.kernel.Kernels;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The float8 casts and GEMMs of an FP8 linear, run by mcore4j's TorchScript module
 * ({@code scripts/make_fp8_linear_module.py}, {@code /io/mcore4j/core/torchscript/fp8_linear.pt}) and, for the casts
 * on a GPU, by a fused kernel. The one place that chooses how the casts run on a device: the device's
 * {@link Fp8CastKernel} ({@link Kernels#find}: mcore4j's CUDA kernel on compute capability 8.9 and newer, which reads
 * the tensor once and writes its float8 copy, the transposed copy and the amax) into float8 buffers the module
 * allocates, else the module's reference cast (float32 copy, scale, clamp, float8 copy, amax and transpose as
 * separate ops), which the kernel equals bit for bit; the choice is logged once per device. And how the GEMMs run: {@code torch._scaled_mm} on a GPU (CUDA on Hopper and Ada), the
 * reference on the CPU: the same float8 operands widened to float32 and multiplied by {@code torch.mm} (libtorch
 * 2.7.1 has no CPU {@code _scaled_mm}). The choice is made once per device by trying {@code _scaled_mm} on a
 * [16, 16] product at a second slot's scale (16 bytes into its buffer): the CPU's reference is announced by one log
 * line; on a GPU a failure is an error, never a fallback to the slow reference.
 *
 * <p>The module runs with TorchScript's graph optimisation off ({@link GraphOptimization}): libtorch's fuser
 * cannot compile a float8 cast (nvrtc has no {@code float8_e4m3fn}), and every op of the module is one large
 * kernel anyway. Stateless and shared by the process; thread-safe.
 */
public final class Fp8Kernels {
    private static final Logger LOG = LoggerFactory.getLogger(Fp8Kernels.class);
    /** Resource path of the TorchScript archive. */
    static final String RESOURCE = "/io/mcore4j/core/torchscript/fp8_linear.pt";
    /** libtorch's ScalarType codes of the output dtypes. */
    private static final long HALF = 5;
    private static final long FLOAT = 6;
    private static final long BFLOAT16 = 15;

    private static final Map<String, Boolean> SCALED_MM = new ConcurrentHashMap<>();
    private static final Map<String, Optional<Fp8CastKernel>> FUSED_CAST = new ConcurrentHashMap<>();

    /**
     * A float8 copy of an operand {@code [rows, cols]}: the copy, its row-major transpose {@code [cols, rows]} (the
     * layout the operand takes in the linear's other GEMM) and the 0-dim float32 inverse scale. The float8 tensors
     * are handles of DJL dtype {@code UNKNOWN}.
     *
     * @param q the float8 copy
     * @param qT its transpose
     * @param inverseScale {@code 1 / scale}
     */
    public record Quantized(NDArray q, NDArray qT, NDArray inverseScale) {}

    private final TorchScriptModule module;
    private final NDArray quantize;
    private final NDArray emptyFp8;
    private final NDArray backward;
    private final NDArray update;
    private final NDArray dequantize;
    private final NDArray widen;

    private Fp8Kernels() {
        this.module = TorchScriptModules.shared(Fp8Kernels.class, RESOURCE);
        NDManager host = Mcore4j.newRootManager().newSubManager(Device.cpu());
        this.quantize = TorchScriptModules.methodMarker(host, "quantize");
        this.emptyFp8 = TorchScriptModules.methodMarker(host, "empty_fp8");
        this.backward = TorchScriptModules.methodMarker(host, "backward");
        this.update = TorchScriptModules.methodMarker(host, "update");
        this.dequantize = TorchScriptModules.methodMarker(host, "dequantize");
        this.widen = TorchScriptModules.methodMarker(host, "widen");
    }

    /** @return the process's kernels, loaded on first use */
    public static Fp8Kernels get() {
        return Holder.INSTANCE;
    }

    /**
     * Whether the GEMMs on {@code device} run {@code torch._scaled_mm}; decided on the first call per device.
     *
     * @param device the tensors' device
     * @return true for {@code _scaled_mm}, false for the float32 reference (logged once; CPU only)
     * @throws IllegalStateException on a GPU where {@code _scaled_mm} fails, with libtorch's reason
     */
    public boolean scaledMm(Device device) {
        return SCALED_MM.computeIfAbsent(device.toString(), d -> probe(device));
    }

    private boolean probe(Device device) {
        try (NDManager temp = Mcore4j.newRootManager().newSubManager(device)) {
            NDArray x = temp.ones(new Shape(16, 16));
            NDArray scale = temp.ones(new Shape(3, Fp8Scaling.SCALE_STRIDE));
            NDArray history = temp.zeros(new Shape(1, 3));
            NDArray cfg = config(temp, 1, false, false, true, DataType.FLOAT32); // slot 1: a scale view at a non-zero offset
            NDList q = run(quantize, x, scale, scale, history, cfg);
            NDArray empty = temp.zeros(new Shape(0));
            run(null, q.get(0), q.get(0), q.get(2), q.get(2), empty, cfg);
            return true;
        } catch (EngineException e) {
            String reason = abbreviated((e.getMessage() == null ? e.toString() : e.getMessage().lines()
                    .filter(l -> l.contains("Error") || l.contains("Could not")).findFirst()
                    .orElse(e.getMessage().lines().findFirst().orElse(""))).strip());
            if (device.isGpu()) {
                // a GPU without float8 GEMMs would train at a fraction of bf16's speed, and a failing _scaled_mm on one
                // that has them is a bug to see: neither falls back
                throw new IllegalStateException("FP8 GEMMs (--fp8-format) need torch._scaled_mm on " + device
                        + " (a GPU with float8 tensor cores: Hopper or Ada), which failed: " + reason, e);
            }
            LOG.info("FP8 GEMMs on {} run the float32 reference (same float8 operands, torch.mm): torch._scaled_mm is"
                    + " not available there ({})", device, reason);
            return false;
        }
    }

    /** @return the first 200 characters of a libtorch error line (its operator lists run to thousands) */
    private static String abbreviated(String line) {
        return line.length() <= 200 ? line : line.substring(0, 200) + "...";
    }

    /**
     * The configuration tensor of one cast-and-GEMM call: a CPU int64 tensor the module reads without a device wait.
     *
     * @param owner the manager that owns it (its device is not used: the tensor is on the CPU)
     * @param slot the tensor's slot in the scaling state
     * @param e5m2 whether the cast is to e5m2 (else e4m3)
     * @param current whether the scale comes from the tensor's own amax (tensorwise) instead of its slot
     * @param scaledMm whether the GEMMs run {@code _scaled_mm}
     * @param outType the GEMMs' output dtype: float32, float16 or bfloat16
     * @return the tensor
     */
    static NDArray config(NDManager owner, int slot, boolean e5m2, boolean current, boolean scaledMm, DataType outType) {
        long code = switch (outType) {
            case FLOAT32 -> FLOAT;
            case FLOAT16 -> HALF;
            case BFLOAT16 -> BFLOAT16;
            default -> throw new IllegalArgumentException("FP8 GEMMs write float32, float16 or bfloat16, not " + outType);
        };
        NDManager host = owner.newSubManager(Device.cpu());
        NDArray cfg = host.create(new long[] {slot, e5m2 ? 1 : 0, current ? 1 : 0, scaledMm ? 1 : 0, code});
        cfg.attach(owner);
        host.close();
        return cfg;
    }

    /**
     * The device's fused cast, looked up (and the choice logged) on the first call per device. Where the CUDA runtime
     * or NVRTC does not load the reference casts, with one warning; a kernel that fails to compile is an error.
     *
     * @param device the tensors' device
     * @return the kernel, or null where the reference casts
     */
    private static Fp8CastKernel fusedCast(Device device) {
        return FUSED_CAST.computeIfAbsent(device.toString(), d -> {
            Optional<Fp8CastKernel> kernel;
            try {
                kernel = Kernels.find(Fp8CastKernel.class, device);
            } catch (IllegalStateException e) {
                if (!(e.getCause() instanceof LinkageError)) {
                    throw e; // the kernel source failed to compile or load: a bug to see, not a reason to fall back
                }
                LOG.warn("FP8 casts on {} run the TorchScript reference: the fused cast kernel needs the CUDA runtime and"
                        + " NVRTC, which did not load ({})", device, e.getCause().toString());
                return Optional.empty();
            }
            if (kernel.isPresent()) {
                LOG.info("FP8 casts on {} run mcore4j's fused kernel (float8 copy, transposed copy and amax in one pass)",
                        device);
            } else {
                LOG.info("FP8 casts on {} run the TorchScript reference (no fused float8 cast kernel for the device)", device);
            }
            return kernel;
        }).orElse(null);
    }

    /**
     * Casts an operand in its slot's way: delayed scaling with the slot's scale, recording its amax, or tensorwise;
     * fused where the device has the kernel and it takes {@code x} (an FP8 linear's operands always fit it), else the
     * reference (the fused kernel's float8 buffers are allocated first: one that refuses costs that allocation).
     *
     * @param x {@code [rows, cols]} float32, float16 or bfloat16
     * @param scaling the scaling state
     * @param slot the operand's slot
     * @param cfg the slot's configuration tensor ({@link #config})
     * @return the copies, owned by {@code x}'s manager
     */
    Quantized quantize(NDArray x, Fp8Scaling scaling, int slot, NDArray cfg) {
        Fp8CastKernel fused = fusedCast(x.getDevice());
        Quantized q = fused == null ? null : fusedQuantize(fused, x, scaling, slot, cfg);
        return q != null ? q : referenceQuantize(x, scaling, cfg);
    }

    /**
     * {@link #quantize} by the implementation the caller names, for checks that compare the two: the slot's format
     * and the recipe come from {@code scaling}.
     *
     * @param x {@code [rows, cols]} float32, float16 or bfloat16
     * @param scaling the scaling state (its amax history records the cast under delayed scaling)
     * @param slot a registered slot
     * @param fused whether to cast with the device's fused kernel (else the TorchScript reference)
     * @return the copies, owned by {@code x}'s manager
     * @throws IllegalStateException if {@code fused} and the device has no fused cast or it does not take {@code x}
     */
    public Quantized quantize(NDArray x, Fp8Scaling scaling, int slot, boolean fused) {
        NDArray cfg = config(x.getManager(), slot, scaling.e5m2(slot), scaling.config().recipe() == Fp8Recipe.TENSORWISE,
                false, DataType.FLOAT32);
        try {
            if (!fused) {
                return referenceQuantize(x, scaling, cfg);
            }
            Fp8CastKernel kernel = fusedCast(x.getDevice());
            Quantized q = kernel == null ? null : fusedQuantize(kernel, x, scaling, slot, cfg);
            if (q == null) {
                throw new IllegalStateException("no fused FP8 cast on " + x.getDevice() + " takes " + x.getShape() + " "
                        + DataTypes.of(x) + (kernel == null ? " (the device has none)" : ""));
            }
            return q;
        } finally {
            cfg.close();
        }
    }

    /**
     * Whether FP8 linears on {@code device} recast their cached weights in place under delayed scaling (the device has
     * the fused cast): what a CUDA graph that captures the casts needs.
     *
     * @param device a device
     * @return whether the fused cast loads there
     */
    public boolean castsInPlace(Device device) {
        return fusedCast(device) != null;
    }

    /**
     * Casts {@code x} into existing float8 buffers under delayed scaling, with the device's fused kernel: the same
     * values and amax record as {@link #quantize}, written where {@code q} and {@code qT} already are (a weight cache
     * whose memory a CUDA graph reads keeps its addresses across generations).
     *
     * @param x {@code [rows, cols]} float32, float16 or bfloat16
     * @param scaling the scaling state, delayed recipe
     * @param slot the operand's slot
     * @param q {@code [rows, cols]} float8 buffer of the slot's format
     * @param qT {@code [cols, rows]} float8 buffer
     * @return whether it was cast (false, nothing written: the recipe is not delayed, or the device has no fused cast
     *     that takes {@code x})
     */
    boolean quantizeInto(NDArray x, Fp8Scaling scaling, int slot, NDArray q, NDArray qT) {
        if (scaling.config().recipe() != Fp8Recipe.DELAYED) {
            return false;
        }
        Fp8CastKernel kernel = fusedCast(x.getDevice());
        if (kernel == null) {
            return false;
        }
        return castDelayed(kernel, x, scaling, slot, q, qT);
    }

    /** The fused cast at the slot's delayed scale into {@code q} and {@code qT}, recording the amax in its history. */
    private static boolean castDelayed(Fp8CastKernel kernel, NDArray x, Fp8Scaling scaling, int slot, NDArray q,
                                       NDArray qT) {
        NDArray[] views = scaling.slotViews(slot);
        return kernel.cast(x, q, qT, scaling.e5m2(slot), views[0], views[2]);
    }

    private Quantized referenceQuantize(NDArray x, Fp8Scaling scaling, NDArray cfg) {
        NDList q = run(quantize, x, scaling.scaleBuffer(), scaling.scaleInvBuffer(), scaling.history(), cfg);
        return new Quantized(q.get(0), q.get(1), q.get(2));
    }

    /** @return the fused cast's copies, or null (nothing cast) where the kernel does not take {@code x} */
    private Quantized fusedQuantize(Fp8CastKernel kernel, NDArray x, Fp8Scaling scaling, int slot, NDArray cfg) {
        NDList out = run(emptyFp8, x, cfg);
        NDArray q = out.get(0);
        NDArray qT = out.get(1);
        NDArray inverse;
        if (scaling.config().recipe() == Fp8Recipe.TENSORWISE) {
            inverse = kernel.castCurrent(x, q, qT, scaling.e5m2(slot), x.getManager());
        } else {
            // a handle of its own on the slot's inverse scale: the caller may attach or close it
            inverse = castDelayed(kernel, x, scaling, slot, q, qT) ? scaling.slotViews(slot)[1].reshape(new Shape()) : null;
        }
        if (inverse == null) {
            out.close();
            return null;
        }
        inverse.attach(x.getManager());
        return new Quantized(q, qT, inverse);
    }

    /** {@code forward}: y = x.Wᵀ (+ b) from the float8 x and W. */
    NDArray forward(NDArray qx, NDArray qw, NDArray xInv, NDArray wInv, NDArray bias, NDArray cfg) {
        return run(null, qx, qw, xInv, wInv, bias, cfg).singletonOrThrow();
    }

    /** {@code backward}: dx and dW from the float8 dy, dyᵀ, xᵀ and Wᵀ. */
    NDList backward(NDArray qdy, NDArray qdyT, NDArray dyInv, NDArray qxT, NDArray xInv, NDArray qwT, NDArray wInv,
                    NDArray cfg) {
        return run(backward, qdy, qdyT, dyInv, qxT, xInv, qwT, wInv, cfg);
    }

    /** {@code update}: delayed scaling's step, in place. */
    void update(NDArray history, NDArray scale, NDArray scaleInv, NDArray fp8Max, NDArray currentAmax, NDArray cfg) {
        run(update, history, scale, scaleInv, fp8Max, currentAmax, cfg).close();
    }

    /**
     * The float32 values a float8 tensor stands for.
     *
     * @param q a float8 tensor (a handle of DJL dtype {@code UNKNOWN})
     * @param inverseScale its 0-dim float32 inverse scale
     * @return {@code float32(q) · inverseScale}, owned by {@code q}'s manager
     */
    public NDArray dequantize(NDArray q, NDArray inverseScale) {
        return run(dequantize, q, inverseScale).singletonOrThrow();
    }

    /**
     * The exact float32 values of a float8 tensor (a NaN keeps its sign), for checks that compare float8 tensors bit
     * for bit through {@link NDArray#toFloatArray()}.
     *
     * @param q a float8 tensor (a handle of DJL dtype {@code UNKNOWN})
     * @return {@code float32(q)}, owned by {@code q}'s manager
     */
    public NDArray widen(NDArray q) {
        return run(widen, q).singletonOrThrow();
    }

    private NDList run(NDArray method, NDArray... inputs) {
        NDManager owner = inputs[0].getManager();
        try (NDManager temp = owner.newSubManager();
             GraphOptimization off = GraphOptimization.set(false)) {
            NDArray[] args = new NDArray[inputs.length];
            for (int i = 0; i < inputs.length; i++) {
                args[i] = inputs[i].getName() == null ? inputs[i] : Tensors.detach(inputs[i], temp);
            }
            NDList out = method == null ? module.forward(new NDList(args)) : module.forward(method, args);
            out.attach(owner);
            return out;
        }
    }

    /** @return whether {@code t} can be an FP8 GEMM's output dtype */
    static boolean supportedOutput(DataType t) {
        return t == DataType.FLOAT32 || t == DataType.FLOAT16 || t == DataType.BFLOAT16;
    }

    /** Initialisation-on-demand holder: the module is loaded exactly once. */
    private static final class Holder {
        static final Fp8Kernels INSTANCE = new Fp8Kernels();
    }
}
