package io.mcore4j.cuda;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.TensorMemory;
import io.mcore4j.core.Tensors;

import org.bytedeco.javacpp.Pointer;

/**
 * Memory addresses of DJL PyTorch tensors, to hand to mcore4j's own CUDA kernels (this package) and
 * to NCCL ({@code mcore4j-nccl}): the address of the direct buffer that
 * core's {@link TensorMemory} wraps around a tensor's {@code data_ptr()}, read by JavaCPP
 * ({@code new Pointer(buffer).address()}). That buffer is never read from Java: for a CUDA tensor
 * it points at device memory.
 *
 * <p>Tensors of 2^31 bytes or more: the address comes from a one-element view of the tensor's first
 * element (a view shares the storage, and {@code data_ptr()} of a view includes its offset), so any
 * size works. Slices of a contiguous tensor along dim 0 are contiguous views, and offsets into a
 * tensor are added to its address by the caller.
 */
public final class DevicePointers {
    /** Largest tensor whose address comes straight from DJL's direct buffer. */
    static final long DIRECT_LIMIT_BYTES = Integer.MAX_VALUE;

    private DevicePointers() {}

    /**
     * @param array a tensor
     * @return its size in bytes
     */
    public static long bytes(NDArray array) {
        return Math.multiplyExact(array.size(), (long) DataTypes.of(array).getNumOfBytes());
    }

    /**
     * The address of element 0 of a contiguous tensor.
     *
     * @param array a contiguous PyTorch-engine tensor (any device)
     * @return its data address, or 0 for a tensor without elements
     * @throws IllegalArgumentException if the tensor is not contiguous or not a PyTorch tensor
     */
    public static long address(NDArray array) {
        return address(array, DIRECT_LIMIT_BYTES);
    }

    /** {@link #address(NDArray)} with the direct-buffer limit as a parameter (tests lower it). */
    static long address(NDArray array, long directLimitBytes) {
        return address(array, bytes(array), directLimitBytes);
    }

    /**
     * The address of element 0 of a contiguous tensor of one-byte elements whose dtype DJL cannot name (a float8
     * tensor, DJL dtype {@code UNKNOWN}).
     *
     * @param array a contiguous PyTorch-engine tensor of a one-byte dtype
     * @return its data address, or 0 for a tensor without elements
     * @throws IllegalArgumentException if the tensor is not contiguous or not a PyTorch tensor
     */
    static long addressOfBytes(NDArray array) {
        return address(array, array.size(), DIRECT_LIMIT_BYTES);
    }

    /**
     * {@link #address(NDArray)} for a caller that knows the tensor's size in bytes (a bfloat16 tensor's dtype costs
     * a native call to find out).
     *
     * @param array a contiguous PyTorch-engine tensor
     * @param bytes its size in bytes
     * @return its data address, or 0 for a tensor without elements
     * @throws IllegalArgumentException if the tensor is not contiguous or not a PyTorch tensor
     */
    static long addressOf(NDArray array, long bytes) {
        return address(array, bytes, DIRECT_LIMIT_BYTES);
    }

    private static long address(NDArray array, long bytes, long directLimitBytes) {
        if (bytes == 0) {
            return 0;
        }
        if (!TensorMemory.isContiguous(array)) {
            throw new IllegalArgumentException("tensor " + array.getShape() + " " + array.getDataType()
                    + " is not contiguous; device code (NCCL, CUDA kernels) needs contiguous memory");
        }
        if (bytes <= directLimitBytes) {
            return directAddress(array);
        }
        try (NDManager temp = array.getManager().newSubManager()) {
            NDArray flat = array.reshape(-1);
            flat.attach(temp);
            NDArray first = Tensors.narrow(flat, 0, 0, 1);
            first.attach(temp);
            return directAddress(first);
        }
    }

    /**
     * A JavaCPP pointer at {@code address} that owns nothing (closing or collecting it frees nothing).
     *
     * @param address a memory address
     * @return the pointer
     */
    public static Pointer pointer(long address) {
        return new AddressPointer(address);
    }

    private static long directAddress(NDArray array) {
        return new Pointer(TensorMemory.dataBuffer(array)).address();
    }

    /** A pointer whose address is set from Java; JavaCPP deallocates only what it allocated, so this frees nothing. */
    private static final class AddressPointer extends Pointer {
        AddressPointer(long address) {
            this.address = address;
        }
    }
}
