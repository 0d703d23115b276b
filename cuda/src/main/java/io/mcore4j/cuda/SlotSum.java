package io.mcore4j.cuda;

import ai.djl.ndarray.types.DataType;

import org.bytedeco.cuda.cudart.CUstream_st;

/**
 * The sum of equal slots of device memory on a stream of the caller's choosing ({@code slot_sum.cu}):
 * {@code out[i] = in[i] + in[stride + i] + ...} over the slots, in slot order, accumulated in float32, for float32,
 * float16 and bfloat16. The reduction step of the copy-engine all-reduce of {@code mcore4j-nccl}, which runs on its
 * communicator's second stream where DJL's operations cannot go. {@code out} may be one of the slots.
 */
public final class SlotSum {
    /** Resource path of the CUDA source. */
    static final String SOURCE = "/io/mcore4j/cuda/slot_sum.cu";
    private static final int THREADS = 256;

    private final RuntimeCompiledModule module;

    private SlotSum(RuntimeCompiledModule module) {
        this.module = module;
    }

    /**
     * The kernel for a device, compiled on first use (compute capability 8.0 or newer).
     *
     * @param device CUDA device index
     * @return the sum
     * @throws IllegalStateException if the device is older than 8.0 or the source does not compile
     */
    public static SlotSum forDevice(int device) {
        int capability = RuntimeCompiledModule.computeCapability(device);
        if (capability < 80) {
            throw new IllegalStateException("the slot sum needs compute capability 8.0 or newer; device " + device
                    + " has " + capability / 10 + "." + capability % 10);
        }
        return new SlotSum(RuntimeCompiledModule.load(device, SOURCE));
    }

    /**
     * Queues the sum.
     *
     * @param out address of the result ({@code bytes})
     * @param in address of slot 0
     * @param slots how many slots
     * @param slotBytes distance between slots, a multiple of 16
     * @param bytes bytes of each slot to sum, a multiple of 16
     * @param dtype float32, float16 or bfloat16
     * @param stream where it goes
     * @throws IllegalArgumentException for another dtype, or sizes or addresses that are not 16-byte multiples
     */
    public void sum(long out, long in, int slots, long slotBytes, long bytes, DataType dtype, CUstream_st stream) {
        String kernel = switch (dtype) {
            case FLOAT32 -> "sum_slots_float";
            case FLOAT16 -> "sum_slots_half";
            case BFLOAT16 -> "sum_slots_bf16";
            default -> throw new IllegalArgumentException("the slot sum takes float32, float16 or bfloat16, not " + dtype);
        };
        if (slots < 1 || ((out | in | slotBytes | bytes) & 15) != 0) {
            throw new IllegalArgumentException("slot sum of " + slots + " slots of " + bytes + " bytes " + slotBytes
                    + " apart: addresses, distance and size must be 16-byte multiples");
        }
        long vectors = bytes / 16;
        if (vectors == 0) {
            return;
        }
        try (KernelArgs args = KernelArgs.tensors().longs(in, out, slots, slotBytes / 16, vectors)) {
            module.launchOn(stream, kernel, (vectors + THREADS - 1) / THREADS, 1, THREADS, args.pointers());
        }
    }
}
