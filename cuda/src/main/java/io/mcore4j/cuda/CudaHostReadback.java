package io.mcore4j.cuda;

import static io.mcore4j.cuda.RuntimeCompiledModule.check;
import static org.bytedeco.cuda.global.cudart.cudaEventCreateWithFlags;
import static org.bytedeco.cuda.global.cudart.cudaEventDestroy;
import static org.bytedeco.cuda.global.cudart.cudaEventDisableTiming;
import static org.bytedeco.cuda.global.cudart.cudaEventRecord;
import static org.bytedeco.cuda.global.cudart.cudaEventSynchronize;
import static org.bytedeco.cuda.global.cudart.cudaFreeHost;
import static org.bytedeco.cuda.global.cudart.cudaMallocHost;
import static org.bytedeco.cuda.global.cudart.cudaMemcpyAsync;
import static org.bytedeco.cuda.global.cudart.cudaMemcpyDeviceToHost;
import static org.bytedeco.cuda.global.cudart.cudaSetDevice;
import static org.bytedeco.cuda.global.cudart.cudaSuccess;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.kernel.HostReadback;

import org.bytedeco.cuda.cudart.CUevent_st;
import org.bytedeco.javacpp.LongPointer;
import org.bytedeco.javacpp.Pointer;

/**
 * {@link HostReadback} on a CUDA device: page-locked host memory ({@code cudaMallocHost}), filled by
 * {@code cudaMemcpyAsync} on the thread's {@link CurrentStream} and followed by an event that {@link Buffer#await}
 * waits for ({@code cudaEventSynchronize}), so the host waits for the copy and what was queued before it, not for
 * what was queued after.
 */
final class CudaHostReadback implements HostReadback {
    private final int device;

    /** @param device the CUDA device index */
    CudaHostReadback(int device) {
        this.device = device;
    }

    @Override
    public HostReadback.Buffer open(int capacity) {
        if (capacity < 1) {
            throw new IllegalArgumentException("a readback buffer holds at least one value, not " + capacity);
        }
        return new PinnedBuffer(capacity);
    }

    private final class PinnedBuffer implements HostReadback.Buffer {
        private final int capacity;
        private final Pointer host = new Pointer();
        private final LongPointer values;
        private final CUevent_st landed = new CUevent_st();
        private int copied = -1;

        PinnedBuffer(int capacity) {
            this.capacity = capacity;
            check(cudaSetDevice(device), "cudaSetDevice(" + device + ")");
            check(cudaMallocHost(host, (long) capacity * Long.BYTES), "cudaMallocHost(" + capacity * Long.BYTES + ")");
            this.values = new LongPointer(host).capacity(capacity);
            int r = cudaEventCreateWithFlags(landed, cudaEventDisableTiming);
            if (r != cudaSuccess) {
                cudaFreeHost(host);
                check(r, "cudaEventCreateWithFlags");
            }
        }

        @Override
        public void copyFrom(NDArray source) {
            if (source.getDataType() != DataType.INT64 || source.size() > capacity) {
                throw new IllegalArgumentException("a readback buffer of " + capacity + " int64 values cannot take a "
                        + source.getDataType() + " tensor of shape " + source.getShape());
            }
            int n = Math.toIntExact(source.size());
            check(cudaSetDevice(device), "cudaSetDevice(" + device + ")");
            check(cudaMemcpyAsync(host, DevicePointers.pointer(DevicePointers.address(source)), (long) n * Long.BYTES,
                    cudaMemcpyDeviceToHost, CurrentStream.get()), "cudaMemcpyAsync (device to host)");
            check(cudaEventRecord(landed, CurrentStream.get()), "cudaEventRecord");
            copied = n;
        }

        @Override
        public long[] await() {
            if (copied < 0) {
                throw new IllegalStateException("no copy was queued into this readback buffer");
            }
            check(cudaEventSynchronize(landed), "cudaEventSynchronize");
            long[] out = new long[copied];
            values.get(out);
            return out;
        }

        @Override
        public void close() {
            cudaEventDestroy(landed);
            cudaFreeHost(host);
        }
    }
}
