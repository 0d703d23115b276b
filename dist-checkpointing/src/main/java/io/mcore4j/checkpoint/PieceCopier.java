package io.mcore4j.checkpoint;

import io.mcore4j.core.autograd.NoGrad;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.index.NDIndex;
import ai.djl.ndarray.types.Shape;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;

/**
 * Copies the intersection of a stored shard and a target tensor from the shard file into the target.
 *
 * <p>The stored shard is row-major in the file. Its part inside the intersection box is a series of
 * contiguous runs: the innermost dims where the box spans the whole stored shard merge into one
 * run with the next dim out. Runs are read with positional reads into a host staging buffer laid
 * out as the box (dense, row-major), in slabs along dim 0 of at most {@code chunkBytes}; short runs
 * close together are read through a window instead of one read each. Each slab becomes a
 * temporary array (sharing the staging buffer) that is written into the target's sub-box with
 * autograd off, then freed before the buffer is reused.
 */
final class PieceCopier implements AutoCloseable {
    /** Runs at least this long are read straight into the staging buffer. */
    private static final int DIRECT_RUN_BYTES = 256 << 10;
    private static final int WINDOW_BYTES = 4 << 20;

    private final int chunkBytes;
    private final NDManager scratch;
    private ByteBuffer staging;
    private ByteBuffer window;
    private ByteBuffer wide;

    PieceCopier(int chunkBytes, NDManager scratch) {
        this.chunkBytes = chunkBytes;
        this.scratch = scratch;
    }

    /**
     * @param file the open shard file
     * @param label the file's path, for errors
     * @param dataStart absolute offset of the stored shard's first byte
     * @param stored the stored shard's block of the global tensor
     * @param dtype its dtype (equal to the target's)
     * @param piece the intersection of {@code stored} and {@code targetBox}
     * @param target the tensor to fill
     * @param targetBox the target's block of the global tensor
     */
    void copy(FileChannel file, String label, long dataStart, Box stored, SafetensorsDtype dtype, Box piece,
              NDArray target, Box targetBox) throws IOException {
        int dims = piece.dims();
        if (dims == 0) {
            copySlab(file, label, dataStart, stored, dtype, piece, target, targetBox);
            return;
        }
        long rowBytes = piece.volume() / Math.max(1, piece.size(0)) * dtype.bytes();
        long rowsPerSlab = Math.max(1, chunkBytes / Math.max(1, rowBytes));
        for (long r = 0; r < piece.size(0); r += rowsPerSlab) {
            long[] offset = piece.offset();
            long[] shape = piece.shape();
            offset[0] += r;
            shape[0] = Math.min(rowsPerSlab, piece.size(0) - r);
            copySlab(file, label, dataStart, stored, dtype, new Box(offset, shape), target, targetBox);
        }
    }

    private void copySlab(FileChannel file, String label, long dataStart, Box stored, SafetensorsDtype dtype,
                          Box slab, NDArray target, Box targetBox) throws IOException {
        long bytes = slab.volume() * dtype.bytes();
        if (bytes > Integer.MAX_VALUE) {
            throw new CheckpointException(label + ": one row of " + bytes + " bytes is too large to stage; "
                    + "split the tensor along dim 0");
        }
        ByteBuffer dest = staging((int) bytes);
        readBox(file, label, dataStart, stored, dtype.bytes(), slab, dest);
        NDArray values = dtype == SafetensorsDtype.BF16 ? widened(dest, new Shape(slab.shape()))
                : scratch.create(dest, new Shape(slab.shape()), dtype.dataType());
        try {
            if (!target.getDevice().equals(values.getDevice())) {
                NDArray moved = values.toDevice(target.getDevice(), true);
                values.close();
                values = moved;
            }
            try (NoGrad ignored = NoGrad.enter()) {
                target.set(index(slab, targetBox), values);
            }
        } finally {
            values.close(); // it shares the staging buffer, which the next slab overwrites
        }
    }

    /** Reads the part of the stored shard inside {@code box} into {@code dest}, dense and row-major. */
    private void readBox(FileChannel file, String label, long dataStart, Box stored, int elementBytes, Box box,
                         ByteBuffer dest) throws IOException {
        int dims = box.dims();
        long[] stride = new long[dims];
        long s = 1;
        for (int d = dims - 1; d >= 0; d--) {
            stride[d] = s;
            s *= stored.size(d);
        }
        // k: the innermost dim where the box is narrower than the stored shard; dims after it are whole
        int k = dims - 1;
        while (k >= 0 && box.size(k) == stored.size(k)) {
            k--;
        }
        long runElements = k < 0 ? Math.max(1, box.volume()) : box.size(k) * stride[k];
        long runBytes = runElements * elementBytes;
        long runs = 1;
        for (int d = 0; d < k; d++) {
            runs *= box.size(d);
        }
        long base = 0;
        for (int d = 0; d < dims; d++) {
            base += (box.offset(d) - stored.offset(d)) * stride[d];
        }
        long first = dataStart + base * elementBytes;
        RunCursor cursor = new RunCursor(box, k, stride, first, elementBytes);
        long last = first;
        for (int d = 0; d < k; d++) {
            last += (box.size(d) - 1) * stride[d] * elementBytes;
        }
        long span = last + runBytes - first;
        boolean direct = runBytes >= DIRECT_RUN_BYTES || runs == 1 || span > 8 * runs * runBytes;
        int destAt = 0;
        if (direct) {
            for (long i = 0; i < runs; i++) {
                ByteBuffer target = dest.slice(destAt, (int) runBytes);
                SafetensorsHeader.readFully(file, target, cursor.next(), label);
                destAt += (int) runBytes;
            }
            return;
        }
        ByteBuffer win = window();
        long winStart = 0;
        long winEnd = 0;
        for (long i = 0; i < runs; i++) {
            long at = cursor.next();
            if (at + runBytes > winEnd) {
                winStart = at;
                winEnd = Math.min(at + win.capacity(), last + runBytes);
                win.clear().limit((int) (winEnd - winStart));
                SafetensorsHeader.readFully(file, win, winStart, label);
            }
            dest.put(destAt, win, (int) (at - winStart), (int) runBytes);
            destAt += (int) runBytes;
        }
    }

    /** File positions of the runs of a box, in row-major order of the dims before the run dim. */
    private static final class RunCursor {
        private final Box box;
        private final int outerDims;
        private final long[] byteStride;
        private final long[] index;
        private long position;
        private boolean started;

        RunCursor(Box box, int runDim, long[] stride, long first, int elementBytes) {
            this.box = box;
            this.outerDims = Math.max(0, runDim);
            this.byteStride = new long[outerDims];
            for (int d = 0; d < outerDims; d++) {
                byteStride[d] = stride[d] * elementBytes;
            }
            this.index = new long[outerDims];
            this.position = first;
        }

        long next() {
            if (!started) {
                started = true;
                return position;
            }
            for (int d = outerDims - 1; d >= 0; d--) {
                if (++index[d] < box.size(d)) {
                    position += byteStride[d];
                    return position;
                }
                position -= (box.size(d) - 1) * byteStride[d];
                index[d] = 0;
            }
            throw new IllegalStateException("no more runs in " + box);
        }
    }

    private static NDIndex index(Box slab, Box targetBox) {
        if (slab.equals(targetBox)) {
            return new NDIndex("...");
        }
        StringBuilder b = new StringBuilder();
        for (int d = 0; d < slab.dims(); d++) {
            long from = slab.offset(d) - targetBox.offset(d);
            b.append(d == 0 ? "" : ",").append(from).append(':').append(from + slab.size(d));
        }
        return new NDIndex(b.toString());
    }

    private ByteBuffer staging(int bytes) {
        if (staging == null || staging.capacity() < bytes) {
            staging = ByteBuffer.allocateDirect(Math.max(bytes, Math.min(chunkBytes, 1 << 16)));
        }
        return staging.slice(0, bytes);
    }

    /**
     * bfloat16 values as a float32 array: DJL cannot create a bfloat16 tensor, but every bfloat16 is
     * a float32 with the low 16 bits zero, and the copy into a bfloat16 target rounds each back to
     * the same bits (NaN payloads aside).
     */
    private NDArray widened(ByteBuffer bf16, Shape shape) {
        int n = Math.toIntExact(shape.size());
        if (wide == null || wide.capacity() < 4 * n) {
            wide = ByteBuffer.allocateDirect(Math.max(4 * n, 4 * (chunkBytes / 2))).order(java.nio.ByteOrder.nativeOrder());
        }
        ByteBuffer in = bf16.duplicate().order(java.nio.ByteOrder.LITTLE_ENDIAN);
        wide.clear();
        for (int i = 0; i < n; i++) {
            wide.putInt((in.getShort() & 0xFFFF) << 16);
        }
        wide.flip();
        return scratch.create(wide.asFloatBuffer(), shape, ai.djl.ndarray.types.DataType.FLOAT32);
    }

    private ByteBuffer window() {
        if (window == null) {
            window = ByteBuffer.allocateDirect(WINDOW_BYTES);
        }
        return window;
    }

    @Override
    public void close() {
        staging = null;
        window = null;
        wide = null;
    }
}
