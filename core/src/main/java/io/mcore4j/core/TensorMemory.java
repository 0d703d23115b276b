package io.mcore4j.core;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.pytorch.engine.PtNDArray;
import ai.djl.pytorch.engine.PtNDManager;

import java.lang.reflect.Field;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.ByteBuffer;
import java.util.List;

/**
 * The memory behind a tensor: its address for a native library (NCCL) that reads and writes it, and
 * whether it borrows a Java buffer ({@link #borrowsHostMemory}).
 * DJL has no public API for a tensor's {@code data_ptr()}; its package-private native
 * {@code PyTorchLibrary.torchDirectByteBuffer(handle)} (DJL 0.35.1) wraps {@code data_ptr()} of a
 * contiguous tensor of fewer than 2^31 bytes in a direct {@link ByteBuffer}. That buffer must never
 * be read from Java: for a CUDA tensor it points at device memory; only its address is meaningful.
 *
 * <p>Access: the methods and the {@code PyTorchLibrary.LIB} singleton are reached once by
 * reflection ({@code setAccessible(true)}). On the class path DJL is in the unnamed module, and on
 * the module path its jars are automatic modules, which open every package; either way no
 * {@code --add-opens} is needed. If DJL changes these internals, the first call fails with an
 * {@link IllegalStateException} naming what is missing.
 */
public final class TensorMemory {
    private TensorMemory() {}

    /**
     * Empties each tensor in place (zero elements, no storage; {@code Tensor.set_()}), so that its
     * memory goes back to the allocator now even where libtorch still refers to the tensor object:
     * a leaf's {@code .grad}, which lives as long as the leaf. Every handle to these tensors then sees
     * an empty tensor; use it only for values that nothing will read again.
     *
     * @param tensors PyTorch-engine tensors whose values are no longer needed
     */
    public static void releaseStorage(List<NDArray> tensors) {
        StorageRelease.get().release(tensors);
        forgetShapes(tensors);
    }

    /**
     * Makes each target, in place, a tensor over its source's memory with the source's shape, offset and
     * strides ({@code Tensor.set_(source)} with grad mode off): no copy, and the target keeps its identity
     * (a parameter stays the same autograd leaf, every handle to it sees the new values). The inverse of
     * {@link #releaseStorage} for ZeRO-3's parameters, which hold their values only while read. A graph
     * that saved a target before cannot run backward afterwards (its version counter moved).
     *
     * @param targets PyTorch-engine tensors to repoint
     * @param sources one per target, same dtype and device
     * @throws IllegalArgumentException if the lists differ in length
     */
    public static void shareStorage(List<NDArray> targets, List<NDArray> sources) {
        StorageRelease.get().share(targets, sources);
        forgetShapes(targets);
    }

    /** Drops the shape DJL caches in each handle: the tensors' shapes changed under it. */
    private static void forgetShapes(List<NDArray> tensors) {
        for (NDArray t : tensors) {
            if (t instanceof PtNDArray) {
                try {
                    PtField.SHAPE.get().set(t, null);
                } catch (IllegalAccessException e) {
                    throw new IllegalStateException("PtNDArray.shape is not accessible: " + e.getMessage(), e);
                }
            }
        }
    }

    /**
     * A direct buffer over the data of a contiguous tensor of fewer than 2^31 bytes; only its
     * address may be used (for a CUDA tensor the memory is on the device).
     *
     * @param array a contiguous PyTorch-engine tensor with at least one element
     * @return a buffer whose address is the tensor's {@code data_ptr()}
     * @throws IllegalArgumentException if the tensor is not a PyTorch-engine tensor
     */
    public static ByteBuffer dataBuffer(NDArray array) {
        return (ByteBuffer) invoke(Torch.access().directBuffer, handle(array));
    }

    /**
     * @param array a PyTorch-engine tensor
     * @return whether its memory is contiguous in row-major order
     * @throws IllegalArgumentException if the tensor is not a PyTorch-engine tensor
     */
    public static boolean isContiguous(NDArray array) {
        return (Boolean) invoke(Torch.access().isContiguous, handle(array));
    }

    /**
     * {@code array} itself if it is contiguous, else a contiguous copy (on the same device) owned by
     * {@code owner}.
     *
     * @param array a PyTorch-engine tensor
     * @param owner manager that owns a copy, if one is made
     * @return a contiguous tensor with the same values
     * @throws IllegalArgumentException if the tensor or the manager is not of the PyTorch engine
     */
    public static NDArray contiguous(NDArray array, NDManager owner) {
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
     * Whether {@code array} borrows host memory from a Java buffer: on CPU, DJL creates a tensor from
     * Java data ({@code manager.create(long[])}, ...) over a direct buffer that only the DJL handle
     * keeps alive. Closing that handle lets the buffer be collected while libtorch may still read
     * the memory (autograd saves index tensors for backward), so such a handle must live until the
     * pass ends; {@link io.mcore4j.core.autograd.AutogradScope} never closes one early.
     *
     * @param array any tensor
     * @return true if closing the handle could free memory that libtorch still refers to
     */
    public static boolean borrowsHostMemory(NDArray array) {
        if (!(array instanceof PtNDArray)) {
            return false;
        }
        try {
            return PtField.DATA_REF.get().get(array) != null;
        } catch (IllegalAccessException e) {
            throw new IllegalStateException("PtNDArray.dataRef is not accessible: " + e.getMessage(), e);
        }
    }

    /**
     * Hands the Java buffer that {@code from} borrows (if any) to {@code to}, a handle over the same
     * storage, so that the buffer stays reachable once {@code from} is closed: DJL drops its reference
     * to the buffer when a handle closes, and the garbage collector then frees memory libtorch still
     * uses through {@code to}. No-op when {@code from} borrows nothing.
     *
     * @param from a handle about to be closed
     * @param to a handle over the same storage that lives on
     * @throws IllegalStateException if DJL's {@code PtNDArray.dataRef} cannot be reached
     */
    static void moveHostMemory(NDArray from, NDArray to) {
        if (!(from instanceof PtNDArray) || !(to instanceof PtNDArray)) {
            return;
        }
        try {
            Object buffer = PtField.DATA_REF.get().get(from);
            if (buffer != null) {
                PtField.DATA_REF.get().set(to, buffer);
            }
        } catch (IllegalAccessException e) {
            throw new IllegalStateException("PtNDArray.dataRef is not accessible: " + e.getMessage(), e);
        }
    }

    private static long handle(NDArray array) {
        if (!(array instanceof PtNDArray pt)) {
            throw new IllegalArgumentException("native memory access needs PyTorch-engine tensors, got "
                    + array.getClass().getName());
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

    /** A private field of DJL's {@code PtNDArray}, looked up once; {@link #get} fails naming what is missing. */
    private record PtField(Field field, String name, String failure) {
        /** {@code dataRef}, the Java buffer a tensor created from Java data borrows. */
        static final PtField DATA_REF = of("dataRef");
        /** {@code shape}, the shape a handle caches on first use. */
        static final PtField SHAPE = of("shape");

        private static PtField of(String name) {
            try {
                Field field = PtNDArray.class.getDeclaredField(name);
                field.setAccessible(true);
                return new PtField(field, name, null);
            } catch (ReflectiveOperationException | RuntimeException e) {
                return new PtField(null, name, e.toString());
            }
        }

        Field get() {
            if (field == null) {
                throw new IllegalStateException("cannot reach DJL's PtNDArray." + name + " (DJL 0.35.1 has it): " + failure);
            }
            return field;
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
