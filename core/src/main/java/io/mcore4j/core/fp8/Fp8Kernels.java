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
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The float8 casts and GEMMs of an FP8 linear, run by mcore4j's TorchScript module
 * ({@code scripts/make_fp8_linear_module.py}, {@code /io/mcore4j/core/torchscript/fp8_linear.pt}). The one place
 * that chooses how the GEMMs run on a device: {@code torch._scaled_mm} on a GPU (CUDA on Hopper and Ada), the
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

    private final TorchScriptModule module;
    private final NDArray quantizeWeight;
    private final NDArray backward;
    private final NDArray update;
    private final NDArray dequantize;

    private Fp8Kernels() {
        this.module = TorchScriptModules.shared(Fp8Kernels.class, RESOURCE);
        NDManager host = Mcore4j.newRootManager().newSubManager(Device.cpu());
        this.quantizeWeight = marker(host, "quantize_weight");
        this.backward = marker(host, "backward");
        this.update = marker(host, "update");
        this.dequantize = marker(host, "dequantize");
    }

    private static NDArray marker(NDManager host, String method) {
        NDArray m = host.zeros(new Shape());
        m.setName("module_method:" + method);
        return m;
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
            NDList w = run(quantizeWeight, x, scale, scale, history, cfg);
            NDArray empty = temp.zeros(new Shape(0));
            run(null, x, w.get(0), w.get(2), empty, scale, scale, history, cfg);
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

    /** {@code forward}: y = x.Wᵀ (+ b), the float8 x and its inverse scale. */
    NDList forward(NDArray x, NDArray qw, NDArray wInv, NDArray bias, NDArray scale, NDArray scaleInv,
                   NDArray history, NDArray cfg) {
        return run(null, x, qw, wInv, bias, scale, scaleInv, history, cfg);
    }

    /** {@code quantize_weight}: the float8 weight, its transpose and inverse scale. */
    NDList quantizeWeight(NDArray w, NDArray scale, NDArray scaleInv, NDArray history, NDArray cfg) {
        return run(quantizeWeight, w, scale, scaleInv, history, cfg);
    }

    /** {@code backward}: dx and dW. */
    NDList backward(NDArray dy, NDArray qx, NDArray xInv, NDArray qwT, NDArray wInv, NDArray scale,
                    NDArray scaleInv, NDArray history, NDArray cfg) {
        return run(backward, dy, qx, xInv, qwT, wInv, scale, scaleInv, history, cfg);
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

    /** @return whether {@code x}'s dtype can be an FP8 GEMM's output dtype */
    static boolean supportedOutput(NDArray x) {
        DataType t = DataTypes.of(x);
        return t == DataType.FLOAT32 || t == DataType.FLOAT16 || t == DataType.BFLOAT16;
    }

    /** Initialisation-on-demand holder: the module is loaded exactly once. */
    private static final class Holder {
        static final Fp8Kernels INSTANCE = new Fp8Kernels();
    }
}
