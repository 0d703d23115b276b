package io.mcore4j.cuda;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.TensorMemory;

import org.bytedeco.javacpp.FloatPointer;
import org.bytedeco.javacpp.Pointer;

import java.util.ArrayList;
import java.util.List;

/**
 * The arguments of one kernel launch, in the kernel's parameter order: each a small native buffer
 * holding a tensor's device address or a scalar; closing frees them. Used around a launch:
 * {@code try (KernelArgs a = KernelArgs.tensors(x, out).longs(rows, cols)) { module.launch(name, blocks, THREADS, a.pointers()); }}.
 * Also the checks the kernels that move 8 two-byte elements at a time share ({@link #halfSuffix},
 * {@link #vectorizable}).
 */
final class KernelArgs implements AutoCloseable {
    private final List<Pointer> pointers = new ArrayList<>();

    private KernelArgs() {}

    /**
     * @param tensors tensors on the launch's device, passed as their data addresses
     * @return the arguments, those addresses first
     */
    static KernelArgs tensors(NDArray... tensors) {
        KernelArgs args = new KernelArgs();
        for (NDArray t : tensors) {
            args.pointers.add(RuntimeCompiledModule.longArg(DevicePointers.address(t)));
        }
        return args;
    }

    /**
     * @param values {@code long long} parameters, appended in order
     * @return this
     */
    KernelArgs longs(long... values) {
        for (long v : values) {
            pointers.add(RuntimeCompiledModule.longArg(v));
        }
        return this;
    }

    /**
     * @param value a {@code float} parameter, appended
     * @return this
     */
    KernelArgs floats(float value) {
        pointers.add(new FloatPointer(value));
        return this;
    }

    /** @return the arguments for {@link RuntimeCompiledModule#launch} */
    Pointer[] pointers() {
        return pointers.toArray(new Pointer[0]);
    }

    @Override
    public void close() {
        for (Pointer p : pointers) {
            p.close();
        }
    }

    /**
     * @param dtype float32, float16 or bfloat16
     * @return the suffix of the kernels for it ({@code f32}, {@code f16}, {@code bf16}) in the sources whose kernels
     *     take all three
     * @throws IllegalArgumentException for another dtype
     */
    static String floatSuffix(DataType dtype) {
        return switch (dtype) {
            case FLOAT32 -> "f32";
            case FLOAT16 -> "f16";
            case BFLOAT16 -> "bf16";
            default -> throw new IllegalArgumentException("dtype " + dtype + " is not float32, float16 or bfloat16");
        };
    }

    /**
     * @param t a tensor
     * @return the suffix of a kernel instantiated for its dtype, {@code "f16"} or {@code "bf16"}; null for others
     */
    static String halfSuffix(NDArray t) {
        return switch (DataTypes.of(t)) {
            case FLOAT16 -> "f16";
            case BFLOAT16 -> "bf16";
            default -> null;
        };
    }

    /**
     * @param t a tensor of a two-byte dtype
     * @return whether a kernel can read it 16 bytes at a time: contiguous, its data 16-byte aligned and its last
     *     dim a multiple of 8 (so is every row)
     */
    static boolean vectorizable(NDArray t) {
        long cols = t.getShape().dimension() == 0 ? 1 : t.getShape().get(t.getShape().dimension() - 1);
        return cols % 8 == 0 && TensorMemory.isContiguous(t) && DevicePointers.address(t) % 16 == 0;
    }
}
