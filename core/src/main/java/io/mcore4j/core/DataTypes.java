package io.mcore4j.core;

import ai.djl.Device;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import ai.djl.util.NativeResource;

import java.lang.ref.WeakReference;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Objects;

/**
 * A tensor's data type, and the conversions and creations that depend on it, for every dtype
 * mcore4j uses, bfloat16 included. Use these instead of {@link NDArray#getDataType()},
 * {@link NDArray#toType}, {@link NDArray#toDevice} and the dtype-taking creations of
 * {@link NDManager} wherever a tensor may be bfloat16.
 *
 * <p>Why: DJL 0.35.1's PyTorch JNI has no bfloat16 case in its dtype mapping. A bfloat16 tensor
 * reports {@link DataType#UNKNOWN}, and any DJL call that passes a bfloat16 or unknown dtype to
 * native code ({@code toType(BFLOAT16)}, {@code zeros(shape, BFLOAT16)}, {@code toDevice},
 * {@code zerosLike}, {@code softmax}, {@code logSoftmax}, a GPU tensor's {@code toByteArray})
 * ends the process without a Java exception. Arithmetic, views, reductions, matrix products,
 * indexing, in-place copies, autograd and conversions <em>from</em> bfloat16 to a DJL-mapped
 * dtype are safe (checked one by one in separate JVMs; see {@code docs/bf16.md}). The steps DJL
 * cannot make run through a TorchScript module of mcore4j's own ({@link BFloat16Bridge}).
 *
 * <p>Every method throws {@link IllegalArgumentException}, never ends the process, for a dtype
 * that neither DJL nor this class can create.
 */
public final class DataTypes {
    /**
     * The tensors last found bfloat16, by identity hash: a direct-mapped cache that spares {@link #of} its module
     * call (tens of microseconds) when asked again about the same tensor object holding the same native tensor
     * ({@code intern} swaps a handle). Racy by design: a slot holds one immutable entry, and a lost or replaced
     * entry costs only the call.
     */
    private static final KnownBFloat16[] KNOWN_BFLOAT16 = new KnownBFloat16[4096];

    private record KnownBFloat16(WeakReference<NDArray> tensor, Object handle) {}

    private DataTypes() {}

    /**
     * The data type of {@code x}: DJL's answer, except that a bfloat16 tensor (which DJL reports as
     * {@link DataType#UNKNOWN}) is {@link DataType#BFLOAT16}. Costs one module call for a bfloat16 tensor
     * not asked about just before.
     *
     * @param x a PyTorch-engine tensor
     * @return its dtype, never {@code UNKNOWN}
     * @throws IllegalArgumentException if libtorch holds {@code x} in a dtype DJL cannot name
     *     (int16, unsigned 16/32/64-bit, complex128, float8, ...)
     */
    public static DataType of(NDArray x) {
        DataType t = x.getDataType();
        if (t != DataType.UNKNOWN) {
            return t;
        }
        int slot = System.identityHashCode(x) & (KNOWN_BFLOAT16.length - 1);
        Object handle = x instanceof NativeResource<?> r ? r.getHandle() : null;
        KnownBFloat16 known = KNOWN_BFLOAT16[slot];
        if (known != null && known.tensor().get() == x && Objects.equals(known.handle(), handle)) {
            return DataType.BFLOAT16;
        }
        long code = BFloat16Bridge.get().dtypeCode(x);
        if (code == BFloat16Bridge.BFLOAT16_CODE) {
            KNOWN_BFLOAT16[slot] = new KnownBFloat16(new WeakReference<>(x), handle);
            return DataType.BFLOAT16;
        }
        throw new IllegalArgumentException("a tensor of shape " + x.getShape() + " has libtorch scalar type "
                + code + ", which DJL 0.35.1 does not map; mcore4j handles float32, float16, bfloat16, float64"
                + " and DJL's integer and boolean types");
    }

    /**
     * Whether {@code x} is bfloat16.
     *
     * @param x a PyTorch-engine tensor
     * @return true for a bfloat16 tensor
     */
    public static boolean isBFloat16(NDArray x) {
        return x.getDataType() == DataType.UNKNOWN && of(x) == DataType.BFLOAT16;
    }

    /**
     * {@code x} converted to {@code target}, like DJL's {@link NDArray#toType}: detached from
     * autograd, on {@code x}'s device, owned by {@code x}'s manager; {@code x} itself when it
     * already has that dtype and {@code copy} is false. Conversions to bfloat16 round to nearest
     * even; conversions from bfloat16 to float32 or float64 are exact.
     *
     * @param x a PyTorch-engine tensor
     * @param target the wanted dtype
     * @param copy whether a tensor of the wanted dtype is copied anyway
     * @return the converted tensor
     * @throws IllegalArgumentException if {@code target} cannot be created (see {@link #requireCreatable})
     */
    public static NDArray toType(NDArray x, DataType target, boolean copy) {
        DataType source = of(x);
        if (target == DataType.BFLOAT16) {
            if (source == DataType.BFLOAT16) {
                return copy ? x.duplicate() : x;
            }
            return BFloat16Bridge.get().toBFloat16(x);
        }
        requireCreatable(target, "convert a " + source + " tensor to");
        // DJL compares the target with its own (UNKNOWN) reading of a bfloat16 source: the
        // conversion is made, and made with a dtype it maps
        return x.toType(target, copy);
    }

    /**
     * {@code x} on {@code device}, like DJL's {@link NDArray#toDevice}, for any dtype: DJL's own
     * passes a bfloat16 tensor's dtype to native code, which ends the process.
     *
     * @param x a PyTorch-engine tensor
     * @param device the target device
     * @param copy whether a tensor already on {@code device} is copied anyway
     * @return {@code x} itself or a new tensor owned by {@code x}'s manager
     */
    public static NDArray toDevice(NDArray x, Device device, boolean copy) {
        if (x.getDataType() != DataType.UNKNOWN) {
            return x.toDevice(device, copy);
        }
        if (x.getDevice().equals(device) && !copy) {
            return x;
        }
        of(x); // refuses a dtype that is not bfloat16
        return BFloat16Bridge.get().toDevice(x, device, x.getManager());
    }

    /**
     * A tensor of {@code shape} filled with {@code value} (rounded to {@code dtype}).
     *
     * @param owner the manager that owns the result
     * @param shape the shape
     * @param value the fill value
     * @param dtype any creatable dtype, bfloat16 included
     * @param device the device
     * @return the new tensor
     */
    public static NDArray full(NDManager owner, Shape shape, double value, DataType dtype, Device device) {
        if (dtype != DataType.BFLOAT16) {
            requireCreatable(dtype, "create a tensor of");
            return owner.full(shape, (float) value, dtype, device);
        }
        try (NDManager temp = owner.newSubManager(device)) {
            // float32 holds every bfloat16 exactly, so the fill value is rounded once, to bfloat16
            NDArray wide = temp.full(shape, (float) value, DataType.FLOAT32, device);
            NDArray out = BFloat16Bridge.get().toBFloat16(wide);
            out.attach(owner);
            return out;
        }
    }

    /**
     * An uninitialised tensor, like DJL's {@link NDManager#create(Shape, DataType, Device)}.
     *
     * @param owner the manager that owns the result
     * @param shape the shape
     * @param dtype any creatable dtype, bfloat16 included
     * @param device the device
     * @return the new tensor, contents undefined
     */
    public static NDArray empty(NDManager owner, Shape shape, DataType dtype, Device device) {
        if (dtype == DataType.BFLOAT16) {
            return BFloat16Bridge.get().empty(owner, shape, device);
        }
        return owner.create(shape, checked(dtype), device);
    }

    /**
     * @param owner the manager that owns the result
     * @param shape the shape
     * @param dtype any creatable dtype, bfloat16 included
     * @param device the device
     * @return a tensor of zeros
     */
    public static NDArray zeros(NDManager owner, Shape shape, DataType dtype, Device device) {
        return dtype == DataType.BFLOAT16 ? full(owner, shape, 0, dtype, device) : owner.zeros(shape, checked(dtype), device);
    }

    /**
     * @param owner the manager that owns the result (and whose device it lands on)
     * @param shape the shape
     * @param dtype any creatable dtype, bfloat16 included
     * @return a tensor of zeros on {@code owner}'s device
     */
    public static NDArray zeros(NDManager owner, Shape shape, DataType dtype) {
        return zeros(owner, shape, dtype, owner.getDevice());
    }

    /**
     * @param owner the manager that owns the result
     * @param shape the shape
     * @param dtype any creatable dtype, bfloat16 included
     * @param device the device
     * @return a tensor of ones
     */
    public static NDArray ones(NDManager owner, Shape shape, DataType dtype, Device device) {
        return dtype == DataType.BFLOAT16 ? full(owner, shape, 1, dtype, device) : owner.ones(shape, checked(dtype), device);
    }

    /**
     * The raw little-endian bytes of {@code x}'s elements in row-major order, in its own dtype (two
     * bytes per bfloat16 element, bit for bit), copied to the host.
     *
     * @param x a PyTorch-engine tensor on any device
     * @return the bytes
     */
    public static byte[] toBytes(NDArray x) {
        if (of(x) != DataType.BFLOAT16) {
            return littleEndian(x.toByteArray(), x.getDataType().getNumOfBytes());
        }
        // float32 holds every bfloat16 exactly (the same sign, exponent and leading 7 mantissa bits,
        // NaN payloads included): the upper half of each float32 is the bfloat16
        try (NDManager temp = x.getManager().newSubManager()) {
            NDArray wide = x.toType(DataType.FLOAT32, false);
            wide.attach(temp);
            ByteBuffer in = ByteBuffer.wrap(wide.toByteArray()).order(ByteOrder.nativeOrder());
            int n = in.remaining() / 4;
            ByteBuffer out = ByteBuffer.allocate(2 * n).order(ByteOrder.LITTLE_ENDIAN);
            for (int i = 0; i < n; i++) {
                out.putShort((short) (in.getInt() >>> 16));
            }
            return out.array();
        }
    }

    /**
     * A tensor made from raw little-endian element bytes (as {@link #toBytes} writes them).
     * bfloat16 values come back bit for bit, except that every NaN becomes libtorch's canonical
     * bfloat16 NaN (0x7FC0).
     *
     * @param owner the manager that owns the result
     * @param bytes the element bytes, {@code shape.size() * dtype size} of them from the position on
     * @param shape the shape
     * @param dtype any creatable dtype, bfloat16 included
     * @param device the device the tensor is made on
     * @return the new tensor
     * @throws IllegalArgumentException if the byte count does not match
     */
    public static NDArray fromBytes(NDManager owner, ByteBuffer bytes, Shape shape, DataType dtype, Device device) {
        int elementSize = dtype.getNumOfBytes();
        long want = shape.size() * elementSize;
        if (bytes.remaining() != want) {
            throw new IllegalArgumentException(bytes.remaining() + " bytes do not hold a " + dtype + " tensor of shape "
                    + shape + " (" + want + " bytes)");
        }
        ByteBuffer in = bytes.slice().order(ByteOrder.LITTLE_ENDIAN);
        if (dtype != DataType.BFLOAT16) {
            requireCreatable(dtype, "create a tensor of");
            ByteBuffer direct = ByteBuffer.allocateDirect((int) want).order(ByteOrder.nativeOrder());
            copySwapped(in, direct, elementSize);
            direct.flip();
            try (NDManager host = owner.newSubManager(Device.cpu())) {
                NDArray cpu = host.create(direct, shape, dtype);
                NDArray out = device.equals(Device.cpu()) ? cpu.duplicate() : cpu.toDevice(device, true);
                out.attach(owner);
                return out;
            }
        }
        long n = shape.size();
        ByteBuffer wide = ByteBuffer.allocateDirect(Math.toIntExact(4 * n)).order(ByteOrder.nativeOrder());
        for (long i = 0; i < n; i++) {
            wide.putInt((in.getShort() & 0xFFFF) << 16);
        }
        wide.flip();
        try (NDManager temp = owner.newSubManager(device)) {
            NDArray host = temp.create(wide.asFloatBuffer(), shape, DataType.FLOAT32);
            NDArray onDevice = device.equals(host.getDevice()) ? host : host.toDevice(device, false);
            onDevice.attach(temp);
            NDArray out = BFloat16Bridge.get().toBFloat16(onDevice);
            out.attach(owner);
            return out;
        }
    }

    /**
     * Throws unless DJL's PyTorch engine can create tensors of {@code dtype} (its JNI maps float32,
     * float64, float16, uint8, int32, int8, int64, boolean and complex64; for bfloat16 use this
     * class's methods).
     *
     * @param dtype the dtype
     * @param what what was being done, for the message ("create a tensor of")
     * @throws IllegalArgumentException naming the dtype
     */
    public static void requireCreatable(DataType dtype, String what) {
        if (dtype.ordinal() > DataType.COMPLEX64.ordinal()) {
            throw new IllegalArgumentException("cannot " + what + " dtype " + dtype + ": DJL 0.35.1's PyTorch engine"
                    + " maps only float32, float64, float16, uint8, int32, int8, int64, boolean and complex64"
                    + (dtype == DataType.BFLOAT16 ? " (bfloat16 goes through io.mcore4j.core.DataTypes)" : ""));
        }
    }

    private static DataType checked(DataType dtype) {
        requireCreatable(dtype, "create a tensor of");
        return dtype;
    }

    private static byte[] littleEndian(byte[] nativeBytes, int elementSize) {
        if (ByteOrder.nativeOrder() == ByteOrder.LITTLE_ENDIAN || elementSize == 1) {
            return nativeBytes;
        }
        ByteBuffer out = ByteBuffer.allocate(nativeBytes.length);
        copySwapped(ByteBuffer.wrap(nativeBytes).order(ByteOrder.BIG_ENDIAN), out.order(ByteOrder.LITTLE_ENDIAN), elementSize);
        return out.array();
    }

    /** Copies elements from {@code in} to {@code out}, each buffer read/written in its own byte order. */
    private static void copySwapped(ByteBuffer in, ByteBuffer out, int elementSize) {
        if (in.order() == out.order() || elementSize == 1) {
            out.put(in.duplicate());
            return;
        }
        switch (elementSize) {
            case 2 -> { while (in.hasRemaining()) { out.putShort(in.getShort()); } }
            case 4 -> { while (in.hasRemaining()) { out.putInt(in.getInt()); } }
            case 8 -> { while (in.hasRemaining()) { out.putLong(in.getLong()); } }
            default -> throw new IllegalArgumentException("element size " + elementSize);
        }
    }
}
