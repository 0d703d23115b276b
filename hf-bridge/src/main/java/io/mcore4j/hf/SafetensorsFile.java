package io.mcore4j.hf;


import io.mcore4j.checkpoint.CorruptCheckpointException;
import io.mcore4j.checkpoint.SafetensorsHeader;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * One safetensors file opened for positional reads: the header is parsed once (by
 * dist-checkpointing's {@link SafetensorsHeader}, the project's one parser of the format), and
 * {@link #read} fetches only the bytes of the requested rows and columns, so a rank reads its own
 * shards of a tensor and nothing else. Tensors are viewed as matrices: all dims but the last are
 * rows (a 1-D tensor of n values is n rows of one value).
 */
final class SafetensorsFile implements AutoCloseable {
    /** A tensor's entry: dtype, shape and absolute byte range in the file. */
    record Entry(String name, HfDtype dtype, long[] shape, long begin, long end) {
        long rows() {
            long r = 1;
            for (int d = 0; d < shape.length - 1; d++) {
                r *= shape[d];
            }
            return shape.length <= 1 ? (shape.length == 0 ? 1 : shape[0]) : r;
        }

        long columns() {
            return shape.length <= 1 ? 1 : shape[shape.length - 1];
        }
    }

    private final Path path;
    private final FileChannel channel;
    private final Map<String, Entry> entries;
    private final java.util.concurrent.atomic.AtomicLong bytesRead = new java.util.concurrent.atomic.AtomicLong();

    private SafetensorsFile(Path path, FileChannel channel, Map<String, Entry> entries) {
        this.path = path;
        this.channel = channel;
        this.entries = entries;
    }

    /**
     * Opens a file and reads its header.
     *
     * @param path the file
     * @return the open file; close it
     * @throws HfCheckpointException if the file is missing or its header is malformed
     */
    static SafetensorsFile open(Path path) {
        FileChannel channel;
        try {
            channel = FileChannel.open(path, StandardOpenOption.READ);
        } catch (IOException e) {
            throw new HfCheckpointException("cannot open safetensors file " + path + ": " + e, e);
        }
        try {
            SafetensorsHeader header;
            try {
                header = SafetensorsHeader.read(channel, channel.size(), path.toString());
            } catch (CorruptCheckpointException e) {
                throw new HfCheckpointException(e.getMessage(), e);
            }
            Map<String, Entry> entries = new LinkedHashMap<>();
            for (SafetensorsHeader.Entry e : header.entries()) {
                HfDtype dtype;
                try {
                    dtype = HfDtype.parse(e.dtype().name());
                } catch (IllegalArgumentException unsupported) {
                    throw new HfCheckpointException(path + ": tensor \"" + e.name() + "\" has dtype " + e.dtype().name()
                            + "; only BF16, F16 and F32 can be imported");
                }
                entries.put(e.name(), new Entry(e.name(), dtype, e.shape(), header.dataStart() + e.begin(),
                        header.dataStart() + e.end()));
            }
            return new SafetensorsFile(path, channel, entries);
        } catch (IOException | RuntimeException e) {
            try {
                channel.close();
            } catch (IOException suppressed) {
                e.addSuppressed(suppressed);
            }
            if (e instanceof HfCheckpointException h) {
                throw h;
            }
            throw new HfCheckpointException("cannot read the header of " + path + ": " + e, e);
        }
    }

    /** @return the file's path */
    Path path() {
        return path;
    }

    /** @return bytes of tensor data read so far (headers not counted) */
    long bytesRead() {
        return bytesRead.get();
    }

    /** @return the tensors by name, in header order */
    Map<String, Entry> entries() {
        return entries;
    }

    /**
     * Reads a block of a tensor viewed as a matrix (see the class comment) into float32.
     *
     * @param name the tensor
     * @param row first row
     * @param rows number of rows
     * @param column first column
     * @param columns number of columns
     * @return {@code rows x columns} values, row-major
     * @throws HfCheckpointException if the tensor is absent or the block lies outside it
     */
    float[] read(String name, long row, long rows, long column, long columns) {
        Entry e = entries.get(name);
        if (e == null) {
            throw new HfCheckpointException(path + " has no tensor \"" + name + "\"");
        }
        if (row < 0 || column < 0 || row + rows > e.rows() || column + columns > e.columns()) {
            throw new HfCheckpointException(path + ": tensor \"" + name + "\" of shape " + Arrays.toString(e.shape())
                    + " has no rows [" + row + ", " + (row + rows) + ") x columns [" + column + ", " + (column + columns) + ")");
        }
        long count = rows * columns;
        if (count > Integer.MAX_VALUE - 8) {
            throw new HfCheckpointException(path + ": block of " + count + " values of \"" + name + "\" is too large for one read");
        }
        float[] out = new float[(int) count];
        int bytes = e.dtype().bytes();
        bytesRead.addAndGet(count * bytes);
        try {
            if (columns == e.columns()) {
                ByteBuffer buf = ByteBuffer.allocate((int) (count * bytes));
                readFully(channel, buf, e.begin() + row * e.columns() * bytes, path);
                buf.flip();
                e.dtype().decode(buf, out, 0, (int) count);
            } else {
                ByteBuffer buf = ByteBuffer.allocate((int) (columns * bytes));
                for (long r = 0; r < rows; r++) {
                    buf.clear();
                    readFully(channel, buf, e.begin() + ((row + r) * e.columns() + column) * bytes, path);
                    buf.flip();
                    e.dtype().decode(buf, out, (int) (r * columns), (int) columns);
                }
            }
        } catch (IOException ex) {
            throw new HfCheckpointException("cannot read tensor \"" + name + "\" from " + path + ": " + ex, ex);
        }
        return out;
    }

    private static void readFully(FileChannel channel, ByteBuffer buffer, long position, Path path) throws IOException {
        long at = position;
        while (buffer.hasRemaining()) {
            int n = channel.read(buffer, at);
            if (n < 0) {
                throw new HfCheckpointException(path + " ends at byte " + at + " but " + buffer.remaining()
                        + " more bytes were expected (file truncated)");
            }
            at += n;
        }
    }

    @Override
    public void close() throws IOException {
        channel.close();
    }
}
