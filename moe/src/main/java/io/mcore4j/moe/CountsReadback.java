package io.mcore4j.moe;

import ai.djl.Device;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.TensorMemory;
import io.mcore4j.core.kernel.HostReadback;

import java.util.HashMap;
import java.util.Map;

/**
 * Brings the dispatch's rows-per-expert counts to the host, the one wait of the all-to-all dispatch. On a device with a
 * {@link HostReadback} (a GPU) the counts are copied into page-locked memory behind the work queued so far, the work
 * given beside the read is queued next, and the host then waits for the copy alone: the device runs that work (the
 * shared expert's forward) while the host waits and queues the exchange, where a plain read would leave the device
 * idle from the copy's end until the host queued its next kernel. Elsewhere (the CPU) the counts are read directly
 * and the work runs after.
 *
 * <p>Each thread keeps one buffer per device for the process's life (a few kilobytes of page-locked memory): a read
 * waits for its copy before it returns, so the MoE layers a thread runs one after another share it.
 */
final class CountsReadback {
    /** The smallest buffer opened, in int64 values, so that most layouts open one buffer once. */
    private static final int MIN_CAPACITY = 4096;
    private static final ThreadLocal<Map<Device, Kept>> BUFFERS =
            ThreadLocal.withInitial(HashMap::new);

    private CountsReadback() {}

    /**
     * @param counts a contiguous int64 tensor
     * @param beside work queued after the copy and before the wait, or null
     * @return the counts' values in row-major order
     */
    static long[] read(NDArray counts, Runnable beside) {
        if (counts.getDataType() != DataType.INT64) {
            throw new IllegalArgumentException("the dispatch's counts are int64, not " + counts.getDataType());
        }
        if (!TensorMemory.isContiguous(counts)) {
            long[] values = counts.toLongArray();
            if (beside != null) {
                beside.run();
            }
            return values;
        }
        HostReadback.Buffer buffer = buffer(counts.getDevice(), Math.toIntExact(counts.size()));
        buffer.copyFrom(counts);
        if (beside != null) {
            beside.run();
        }
        return buffer.await();
    }

    /** This thread's buffer for {@code device} holding at least {@code size} values. */
    private static HostReadback.Buffer buffer(Device device, int size) {
        Map<Device, Kept> mine = BUFFERS.get();
        Kept kept = mine.get(device);
        if (kept == null || kept.capacity() < size) {
            if (kept != null) {
                kept.buffer().close();
            }
            int capacity = Math.max(MIN_CAPACITY, size);
            kept = new Kept(HostReadback.open(device, capacity), capacity);
            mine.put(device, kept);
        }
        return kept.buffer();
    }

    /** A device's open buffer and its capacity. */
    private record Kept(HostReadback.Buffer buffer, int capacity) {}
}
