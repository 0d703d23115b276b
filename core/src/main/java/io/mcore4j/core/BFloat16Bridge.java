package io.mcore4j.core;

import ai.djl.Device;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The libtorch calls that DJL 0.35.1 cannot make for bfloat16, run through mcore4j's own
 * TorchScript module ({@code scripts/make_bfloat16_module.py}): DJL's PyTorch JNI maps no DJL data
 * type to libtorch's bfloat16 and ends the process (a bare C++ {@code throw;}) when asked to create
 * one or convert to one. The module is loaded once per process, on first use, on a manager that
 * lives as long as the JVM; it has no parameters and no state, and libtorch runs a scripted method
 * from several threads at once.
 */
final class BFloat16Bridge {
    /** Resource path of the TorchScript archive. */
    static final String RESOURCE = "/io/mcore4j/core/torchscript/bfloat16.pt";
    /** libtorch's {@code c10::ScalarType::BFloat16}. */
    static final long BFLOAT16_CODE = 15;

    private final TorchScriptModule module;
    private final NDArray toDeviceMethod;
    private final NDArray emptyMethod;
    /** One-element int8 templates {@code [1, ..., 1]} by device and rank, which {@link #empty} broadcasts. */
    private final Map<String, NDArray> templates = new ConcurrentHashMap<>();
    private final NDManager templateOwner;

    private BFloat16Bridge() {
        NDManager owner = Mcore4j.newRootManager();
        owner.setName("mcore4j-bfloat16-bridge");
        this.module = TorchScriptModules.load(owner, BFloat16Bridge.class, RESOURCE);
        NDManager host = owner.newSubManager(Device.cpu());
        this.toDeviceMethod = TorchScriptModules.methodMarker(host, "to_device");
        this.emptyMethod = TorchScriptModules.methodMarker(host, "empty");
        this.templateOwner = owner.newSubManager();
    }

    /** @return the process's bridge, loaded on first use */
    static BFloat16Bridge get() {
        return Holder.INSTANCE;
    }

    /**
     * @param x any tensor
     * @return libtorch's scalar-type code of {@code x}
     */
    long dtypeCode(NDArray x) {
        return module.callForLong("dtype_code", x);
    }

    /**
     * @param x a tensor of any floating or integer dtype
     * @return a new bfloat16 tensor of {@code x}'s values (rounded to nearest even), on its device,
     *     detached from autograd, owned by {@code x}'s manager
     */
    NDArray toBFloat16(NDArray x) {
        try (NDManager temp = x.getManager().newSubManager()) {
            NDArray out = module.forward(unnamed(x, temp)).singletonOrThrow();
            out.attach(x.getManager());
            return out;
        }
    }

    /**
     * @param x any tensor
     * @param device the target device
     * @param owner the manager that owns the result (its device is not consulted)
     * @return a copy of {@code x} on {@code device}, same dtype, detached
     */
    NDArray toDevice(NDArray x, Device device, NDManager owner) {
        try (NDManager temp = owner.newSubManager(device)) {
            NDArray like = temp.zeros(new Shape(), ai.djl.ndarray.types.DataType.INT8, device);
            NDArray out = module.forward(toDeviceMethod, unnamed(x, temp), like).singletonOrThrow();
            out.attach(owner);
            return out;
        }
    }

    /**
     * @param owner the manager that owns the result
     * @param shape the shape
     * @param device the device
     * @return an uninitialised bfloat16 tensor
     */
    NDArray empty(NDManager owner, Shape shape, Device device) {
        try (NDManager temp = owner.newSubManager(device)) {
            // only the template's shape and device are read: a broadcast view of one kept element per device and rank
            NDArray one = templates.computeIfAbsent(device + "/" + shape.dimension(), k -> {
                NDArray t = templateOwner.zeros(ones(shape.dimension()), ai.djl.ndarray.types.DataType.INT8, device);
                t.attach(templateOwner);
                return t;
            });
            NDArray like = shape.dimension() == 0 ? one : one.broadcast(shape);
            if (like != one) {
                like.attach(temp);
            }
            NDArray out = module.forward(emptyMethod, like).singletonOrThrow();
            out.attach(owner);
            return out;
        }
    }

    private static Shape ones(int dims) {
        long[] d = new long[dims];
        java.util.Arrays.fill(d, 1);
        return new Shape(d);
    }

    /**
     * DJL reads an input's name as a container path ("a.b" a dict entry, "x[]" a list element):
     * a named tensor (a parameter, say) goes in through a fresh, unnamed handle to the same storage.
     */
    private static NDArray unnamed(NDArray x, NDManager temp) {
        if (x.getName() == null) {
            return x;
        }
        return Tensors.detach(x, temp);
    }

    /** Initialisation-on-demand holder: the module is loaded exactly once, under the JVM's class-init lock. */
    private static final class Holder {
        static final BFloat16Bridge INSTANCE = new BFloat16Bridge();
    }
}
