package io.mcore4j.cuda;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.TensorMemory;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.kernel.Fp8CastKernel;

/**
 * {@link Fp8CastKernel} on CUDA: {@code fp8_cast.cu}, from float32, float16 or bfloat16, on devices of compute
 * capability 8.9 or newer (PTX's float8 conversions). One launch per cast, {@value #TILE} x {@value #TILE} elements a
 * block, writing the float8 copy, its transpose and the amax; tensorwise scaling adds an amax pass and a one-thread
 * scale kernel before it.
 */
final class CudaFp8Cast implements Fp8CastKernel {
    /** Resource path of the CUDA source. */
    static final String SOURCE = "/io/mcore4j/cuda/fp8_cast.cu";
    // must match fp8_cast.cu
    private static final int THREADS = 256;
    private static final int TILE = 64;
    /** Most blocks of the amax pass: enough to fill a GPU, each walking the tensor with a stride. */
    private static final long AMAX_BLOCKS = 1024;
    private static final float E4M3_MAX = 448f;
    private static final float E5M2_MAX = 57344f;

    private final RuntimeCompiledModule module;

    CudaFp8Cast(RuntimeCompiledModule module) {
        this.module = module;
    }

    @Override
    public boolean cast(NDArray x, NDArray q, NDArray qT, boolean e5m2, NDArray scale, NDArray amax) {
        Input in = Input.of(x);
        if (in == null) {
            return false;
        }
        fits(x, q, qT);
        scalar(scale, x, "scale");
        if (amax != null) {
            scalar(amax, x, "amax");
        }
        launchCast(in, q, qT, e5m2, DevicePointers.addressOf(scale, 4), amax == null ? 0 : DevicePointers.addressOf(amax, 4));
        return true;
    }

    @Override
    public NDArray castCurrent(NDArray x, NDArray q, NDArray qT, boolean e5m2, NDManager owner) {
        Input in = Input.of(x);
        if (in == null) {
            return null;
        }
        fits(x, q, qT);
        // [2, 4] float32: the amax at [0, 0], the scale at [0, 1], the inverse scale at [1, 0] (16 bytes in)
        NDArray scratch = owner.zeros(new Shape(2, 4), DataType.FLOAT32, x.getDevice());
        long base = DevicePointers.addressOf(scratch, 32);
        long n = in.rows * in.cols;
        long blocks = Math.min(AMAX_BLOCKS, Math.max(1, n / 8 / THREADS));
        try (KernelArgs args = KernelArgs.tensors().longs(in.address, n, base)) {
            module.launch("fp8_amax_" + in.code, blocks, THREADS, args.pointers());
        }
        try (KernelArgs args = KernelArgs.tensors().longs(base).floats(e5m2 ? E5M2_MAX : E4M3_MAX).longs(base + 4, base + 16)) {
            module.launch("fp8_current_scale", 1, 1, args.pointers());
        }
        launchCast(in, q, qT, e5m2, base + 4, 0);
        NDArray inverse = Tensors.narrow(Tensors.narrow(scratch, 0, 1, 2), 1, 0, 1).reshape(new Shape());
        inverse.attach(owner);
        scratch.close();
        return inverse;
    }

    private void launchCast(Input in, NDArray q, NDArray qT, boolean e5m2, long scale, long amax) {
        long qtAddress = qT == null ? 0 : DevicePointers.addressOfBytes(qT);
        try (KernelArgs args = KernelArgs.tensors().longs(in.address, DevicePointers.addressOfBytes(q), qtAddress, scale, amax,
                in.rows, in.cols)) {
            module.launch2d("fp8_cast_" + in.code + (e5m2 ? "_e5m2" : "_e4m3"), (in.cols + TILE - 1) / TILE,
                    (in.rows + TILE - 1) / TILE, THREADS, args.pointers());
        }
    }

    /** Checks that the outputs' shapes fit {@code x} and its transpose. */
    private static void fits(NDArray x, NDArray q, NDArray qT) {
        Shape shape = x.getShape();
        if (!q.getShape().equals(shape) || (qT != null && !qT.getShape().equals(new Shape(shape.get(1), shape.get(0))))) {
            throw new IllegalArgumentException("float8 outputs " + q.getShape() + (qT == null ? "" : " and " + qT.getShape())
                    + " do not fit the input " + shape + " (and its transpose)");
        }
    }

    /** Checks that {@code t} is one float32 element on {@code x}'s device (its address is what the kernel reads). */
    private static void scalar(NDArray t, NDArray x, String what) {
        if (t.size() != 1 || t.getDataType() != DataType.FLOAT32 || !t.getDevice().equals(x.getDevice())) {
            throw new IllegalArgumentException("the fused FP8 cast's " + what + " must be one float32 element on "
                    + x.getDevice() + ", not " + t.getShape() + " " + t.getDataType() + " on " + t.getDevice());
        }
    }

    /**
     * An input the kernels take, read once (a bfloat16 tensor's dtype costs a native call).
     *
     * @param code the kernels' dtype suffix
     * @param address its data address
     * @param rows its first dim
     * @param cols its second dim
     */
    private record Input(String code, long address, long rows, long cols) {
        /** @return the input, or null where the kernels cannot take {@code x}: 2-d, contiguous, 16-byte aligned, dims multiples of 16 */
        static Input of(NDArray x) {
            Shape shape = x.getShape();
            if (shape.dimension() != 2 || shape.get(0) % 16 != 0 || shape.get(1) % 16 != 0 || shape.size() == 0
                    || !TensorMemory.isContiguous(x)) {
                return null;
            }
            DataType dtype = DataTypes.of(x);
            String code = switch (dtype) {
                case FLOAT32 -> "f32";
                case FLOAT16 -> "f16";
                case BFLOAT16 -> "bf16";
                default -> null;
            };
            if (code == null) {
                return null;
            }
            long address = DevicePointers.addressOf(x, shape.size() * dtype.getNumOfBytes());
            return address % 16 == 0 ? new Input(code, address, shape.get(0), shape.get(1)) : null;
        }
    }
}
