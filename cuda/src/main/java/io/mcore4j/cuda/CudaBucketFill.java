package io.mcore4j.cuda;

import static io.mcore4j.cuda.RuntimeCompiledModule.longArg;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.kernel.BucketFillKernel;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.List;
import java.util.Objects;

import org.bytedeco.javacpp.BytePointer;
import org.bytedeco.javacpp.FloatPointer;
import org.bytedeco.javacpp.LongPointer;

/**
 * {@link BucketFillKernel} on CUDA: {@code bucket_fill.cu}, compiled by NVRTC for the device on first use. A launch
 * takes up to {@value #MAX_SEGMENTS} consecutive segments of one source dtype in a table passed by value (no
 * host-to-device copy; zero segments join any launch), so a bucket of the 1.3B model is one launch or a few.
 *
 * <p>Made by {@link CudaKernels} (off with {@code -Dmcore4j.cuda.kernels=false}: the data-parallel reduction then
 * composes the fill from libtorch's kernels).
 */
final class CudaBucketFill implements BucketFillKernel {
    /** Resource path of the CUDA source. */
    static final String SOURCE = "/io/mcore4j/cuda/bucket_fill.cu";

    // must match bucket_fill.cu
    static final int MAX_SEGMENTS = 64;
    static final int CHUNK = 4096;
    static final int THREADS = 256;
    private static final int SEGMENT_BYTES = 32;
    private static final int TABLE_BYTES = 8 + MAX_SEGMENTS * SEGMENT_BYTES;

    private final RuntimeCompiledModule module;

    CudaBucketFill(RuntimeCompiledModule module) {
        this.module = module;
    }

    @Override
    public void fill(NDArray bucket, DataType bucketDtype, List<Segment> segments, float scale) {
        Objects.requireNonNull(bucket, "bucket");
        String to = KernelArgs.floatSuffix(bucketDtype);
        long length = bucket.size();
        long dst = DevicePointers.address(bucket);
        ByteBuffer table = newTable();
        String from = null;
        int count = 0;
        long blocks = 0;
        for (Segment s : segments) {
            Objects.requireNonNull(s, "segment");
            if (s.offset() + s.numel() > length) {
                throw new IllegalArgumentException("segment [" + s.offset() + ", " + (s.offset() + s.numel())
                        + ") lies outside the bucket's " + length + " elements");
            }
            if (s.numel() == 0) {
                continue;
            }
            String code = null;
            long src = 0;
            if (s.source() != null) {
                if (s.source().size() != s.numel()) {
                    throw new IllegalArgumentException("source of shape " + s.source().getShape()
                            + " does not have its segment's " + s.numel() + " elements");
                }
                code = KernelArgs.floatSuffix(s.dtype());
                src = DevicePointers.address(s.source());
            }
            if (count == MAX_SEGMENTS || code != null && from != null && !from.equals(code)) {
                launch(table, count, blocks, from, to, dst, scale);
                table = newTable();
                count = 0;
                blocks = 0;
                from = null;
            }
            if (code != null) {
                from = code;
            }
            int at = 8 + count * SEGMENT_BYTES;
            table.putLong(at, src);
            table.putLong(at + 8, s.numel());
            table.putLong(at + 16, s.offset());
            table.putLong(at + 24, blocks);
            blocks += (s.numel() + CHUNK - 1) / CHUNK;
            count++;
        }
        if (count > 0) {
            launch(table, count, blocks, from, to, dst, scale);
        }
    }

    private static ByteBuffer newTable() {
        return ByteBuffer.allocate(TABLE_BYTES).order(ByteOrder.LITTLE_ENDIAN);
    }

    /** One launch of the table's first {@code count} segments ({@code from} null: only zeros, any kernel). */
    private void launch(ByteBuffer table, int count, long blocks, String from, String to, long dst, float scale) {
        table.putLong(0, count);
        String kernel = "fill_" + (from == null ? to : from) + "_" + to;
        try (BytePointer t = new BytePointer(table.array()); LongPointer out = longArg(dst);
             FloatPointer factor = new FloatPointer(scale)) {
            module.launch(kernel, blocks, THREADS, t, out, factor);
        }
    }
}
