package io.mcore4j.parallel.nccl;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.pytorch.engine.PtNDArray;
import ai.djl.pytorch.engine.PtNDManager;

import java.lang.reflect.Field;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.ByteBuffer;

import org.bytedeco.javacpp.Pointer;

/**
 * Memory addresses of DJL PyTorch tensors, to hand to NCCL. DJL has no public API for a tensor's
 * {@code data_ptr()}; its package-private native {@code PyTorchLibrary.torchDirectByteBuffer(handle)}
 * (DJL 0.35.1) wraps {@code data_ptr()} of a contiguous tensor of fewer than 2^31 bytes in a direct
 * {@link ByteBuffer}, whose address JavaCPP reads ({@code new Pointer(buffer).address()}). That
 * buffer is never read from Java: for a CUDA tensor it points at device memory.
 *
 * <p>Access: the method and the {@code PyTorchLibrary.LIB} singleton are reached once by
 * reflection ({@code setAccessible(true)}). On the class path DJL is in the unnamed module, and on
 * the module path its jars are automatic modules, which open every package; either way no
 * {@code --add-opens} is needed. {@code torchIsContiguous} and {@code torchToContiguous} are reached
 * the same way. If DJL changes these internals, {@link #address} fails with an
 * {@link IllegalStateException} naming what is missing.
 *
 * <p>Tensors of 2^31 bytes or more: the address comes from a one-element view of the tensor's first
 * element (a view shares the storage, and {@code data_ptr()} of a view includes its offset), so any
 * size works. Slices of a contiguous tensor along dim 0 are contiguous views, and offsets into a
 * tensor are added to its address by the caller.
 */
final class DevicePointers {
    /** Largest tensor whose address comes straight from DJL's direct buffer. */
    static final long DIRECT_LIMIT_BYTES = Integer.MAX_VALUE;

    private DevicePointers() {}

    /**
     * @param array a tensor
     * @return its size in bytes
     */
    static long bytes(NDArray array) {
        return Math.multiplyExact(array.size(), (long) array.getDataType().getNumOfBytes());
    }

    /**
     * The address of element 0 of a contiguous tensor.
     *
     * @param array a contiguous PyTorch-engine tensor (any device)
     * @return its data address, or 0 for a tensor without elements
     * @throws IllegalArgumentException if the tensor is not contiguous or not a PyTorch tensor
     */
    static long address(NDArray array) {
        return address(array, DIRECT_LIMIT_BYTES);
    }

    /** {@link #address(NDArray)} with the direct-buffer limit as a parameter (tests lower it). */
    static long address(NDArray array, long directLimitBytes) {
        long bytes = bytes(array);
        if (bytes == 0) {
            return 0;
        }
        if (!isContiguous(array)) {
            throw new IllegalArgumentException("tensor " + array.getShape() + " " + array.getDataType()
                    + " is not contiguous; NCCL needs contiguous memory");
        }
        if (bytes <= directLimitBytes) {
            return directAddress(array);
        }
        try (NDManager temp = array.getManager().newSubManager()) {
            NDArray flat = array.reshape(-1);
            flat.attach(temp);
            NDArray first = flat.get("0:1");
            first.attach(temp);
            return directAddress(first);
        }
    }

    /**
     * @param array a PyTorch-engine tensor
     * @return whether its memory is contiguous in row-major order
     */
    static boolean isContiguous(NDArray array) {
        return (Boolean) invoke(Torch.access().isContiguous, handle(array));
    }

    /**
     * {@code array} itself if it is contiguous, else a contiguous copy (on the same device) owned by
     * {@code owner}.
     *
     * @param array a PyTorch-engine tensor
     * @param owner manager that owns a copy, if one is made
     * @return a contiguous tensor with the same values
     */
    static NDArray contiguous(NDArray array, NDManager owner) {
        if (isContiguous(array)) {
            return array;
        }
        if (!(owner instanceof PtNDManager pt)) {
            throw new IllegalArgumentException("manager " + owner.getClass().getName() + " is not a PyTorch-engine manager");
        }
        long copy = (Long) invoke(Torch.access().toContiguous, handle(array));
        return new PtNDArray(pt, copy);
    }

    /**
     * A JavaCPP pointer at {@code address} that owns nothing (closing or collecting it frees nothing).
     *
     * @param address a memory address
     * @return the pointer
     */
    static Pointer pointer(long address) {
        return new AddressPointer(address);
    }

    private static long directAddress(NDArray array) {
        ByteBuffer buffer = (ByteBuffer) invoke(Torch.access().directBuffer, handle(array));
        return new Pointer(buffer).address();
    }

    private static long handle(NDArray array) {
        if (!(array instanceof PtNDArray pt)) {
            throw new IllegalArgumentException("the NCCL backend needs PyTorch-engine tensors, got " + array.getClass().getName());
        }
        return pt.getHandle();
    }

    private static Object invoke(Method method, long handle) {
        try {
            return method.invoke(Torch.access().lib, handle);
        } catch (InvocationTargetException e) {
            Throwable cause = e.getCause();
            if (cause instanceof RuntimeException r) {
                throw r;
            }
            throw new IllegalStateException("PyTorchLibrary." + method.getName() + " failed: " + cause, cause);
        } catch (IllegalAccessException e) {
            throw new IllegalStateException("PyTorchLibrary." + method.getName() + " is not accessible: " + e.getMessage(), e);
        }
    }

    /** A pointer whose address is set from Java; JavaCPP deallocates only what it allocated, so this frees nothing. */
    private static final class AddressPointer extends Pointer {
        AddressPointer(long address) {
            this.address = address;
        }
    }

    /** The reflective handles, looked up once (lazily, on first use) and never changed. */
    private record Torch(Object lib, Method directBuffer, Method isContiguous, Method toContiguous) {
        private static final Torch ACCESS;
        private static final String FAILURE;

        static {
            Torch access = null;
            String failure = null;
            try {
                Class<?> c = Class.forName("ai.djl.pytorch.jni.PyTorchLibrary");
                Field lib = c.getDeclaredField("LIB");
                lib.setAccessible(true);
                access = new Torch(lib.get(null), method(c, "torchDirectByteBuffer"), method(c, "torchIsContiguous"),
                        method(c, "torchToContiguous"));
            } catch (ReflectiveOperationException | RuntimeException e) {
                failure = e.toString();
            }
            ACCESS = access;
            FAILURE = failure;
        }

        private static Method method(Class<?> c, String name) throws NoSuchMethodException {
            Method m = c.getDeclaredMethod(name, long.class);
            m.setAccessible(true);
            return m;
        }

        static Torch access() {
            if (ACCESS == null) {
                throw new IllegalStateException("cannot reach DJL's ai.djl.pytorch.jni.PyTorchLibrary (torchDirectByteBuffer, "
                        + "torchIsContiguous, torchToContiguous; DJL 0.35.1 has them): " + FAILURE);
            }
            return ACCESS;
        }
    }
}
