package io.mcore4j.data.indexed;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;

/**
 * A read-only, little-endian memory map of a whole file of any size.
 *
 * <p>A {@link MappedByteBuffer} is limited to 2 GiB, so the file is mapped as segments that start every
 * {@code segmentBytes} and reach {@code overlapBytes} into the next one. Any range no longer than the
 * overlap therefore lies inside a single segment and is returned without copying; longer ranges that
 * cross a segment start are copied. The object owns its channel; {@link #close()} closes it, after which
 * every accessor throws {@link IllegalStateException}. (The JDK offers no way to unmap explicitly: the
 * mapped memory is released when the buffers are garbage collected.)
 *
 * <p>A file truncated on disk while mapped makes reads of the lost pages fault (the JVM reports an
 * {@link InternalError}, from compiled code possibly a little after the read). {@link #requireOnDisk}
 * checks a range before it is read; the accessors also turn a fault they see into an
 * {@link UncheckedIOException} around a {@link CorruptDatasetException} naming the file and both
 * sizes ({@link #faulted}).
 */
public final class MappedFile implements AutoCloseable {
    /** Default distance between segment starts: 1 GiB. */
    public static final long DEFAULT_SEGMENT_BYTES = 1L << 30;
    /** Default overlap: ranges up to 64 MiB are always returned without copying. */
    public static final int DEFAULT_OVERLAP_BYTES = 64 << 20;

    private final Path path;
    private final FileChannel channel;
    private final long size;
    private final long segmentBytes;
    private final ByteBuffer[] segments;
    private boolean closed;

    private MappedFile(Path path, FileChannel channel, long size, long segmentBytes, ByteBuffer[] segments) {
        this.path = path;
        this.channel = channel;
        this.size = size;
        this.segmentBytes = segmentBytes;
        this.segments = segments;
    }

    /**
     * Maps a file with the default segment layout.
     *
     * @param path the file
     * @return the mapping
     * @throws IOException if the file cannot be opened or mapped
     */
    public static MappedFile open(Path path) throws IOException {
        return open(path, DEFAULT_SEGMENT_BYTES, DEFAULT_OVERLAP_BYTES);
    }

    /**
     * Maps a file with a chosen segment layout (small values let tests exercise segment crossings).
     *
     * @param path the file
     * @param segmentBytes distance between segment starts, at least 8
     * @param overlapBytes how far each segment reaches into the next, at least 8; segment plus overlap must
     *     stay below 2 GiB
     * @return the mapping
     * @throws IOException if the file cannot be opened or mapped
     * @throws IllegalArgumentException if the layout is invalid
     */
    public static MappedFile open(Path path, long segmentBytes, int overlapBytes) throws IOException {
        // 8 bytes of overlap keep every aligned or unaligned int/long read inside one segment
        if (segmentBytes < 8 || overlapBytes < 8 || segmentBytes + overlapBytes > Integer.MAX_VALUE) {
            throw new IllegalArgumentException("segment size " + segmentBytes + " and overlap " + overlapBytes
                    + " must be >= 8 each and sum to less than 2 GiB");
        }
        FileChannel channel = FileChannel.open(path, StandardOpenOption.READ);
        try {
            long size = channel.size();
            int count = (int) ((size + segmentBytes - 1) / segmentBytes);
            ByteBuffer[] segments = new ByteBuffer[count];
            for (int k = 0; k < count; k++) {
                long start = k * segmentBytes;
                long length = Math.min(segmentBytes + overlapBytes, size - start);
                segments[k] = channel.map(FileChannel.MapMode.READ_ONLY, start, length).order(ByteOrder.LITTLE_ENDIAN);
            }
            return new MappedFile(path, channel, size, segmentBytes, segments);
        } catch (IOException | RuntimeException e) {
            channel.close();
            throw e;
        }
    }

    /**
     * The mapped file.
     *
     * @return its path
     */
    public Path path() {
        return path;
    }

    /**
     * The file's size when it was mapped.
     *
     * @return size in bytes
     */
    public long size() {
        return size;
    }

    /**
     * Reads one byte.
     *
     * @param position byte position
     * @return the byte
     */
    public byte getByte(long position) {
        check(position, 1);
        try {
            return segments[(int) (position / segmentBytes)].get((int) (position % segmentBytes));
        } catch (InternalError e) {
            throw faulted(e);
        }
    }

    /**
     * Reads a little-endian int.
     *
     * @param position byte position
     * @return the value
     */
    public int getInt(long position) {
        check(position, 4);
        try {
            return segments[(int) (position / segmentBytes)].getInt((int) (position % segmentBytes));
        } catch (InternalError e) {
            throw faulted(e);
        }
    }

    /**
     * Reads a little-endian long.
     *
     * @param position byte position
     * @return the value
     */
    public long getLong(long position) {
        check(position, 8);
        try {
            return segments[(int) (position / segmentBytes)].getLong((int) (position % segmentBytes));
        } catch (InternalError e) {
            throw faulted(e);
        }
    }

    /**
     * A read-only little-endian view of a range, positioned at 0 with limit {@code length}.
     *
     * @param position first byte
     * @param length number of bytes
     * @return a view into the mapping when the range lies in one segment, else a heap copy
     * @throws IndexOutOfBoundsException if the range is not inside the file
     */
    public ByteBuffer slice(long position, int length) {
        check(position, length);
        if (length == 0) {
            return ByteBuffer.allocate(0).asReadOnlyBuffer().order(ByteOrder.LITTLE_ENDIAN);
        }
        int k = (int) (position / segmentBytes);
        int offset = (int) (position - k * segmentBytes);
        if (offset + length <= segments[k].capacity()) {
            return segments[k].slice(offset, length).asReadOnlyBuffer().order(ByteOrder.LITTLE_ENDIAN);
        }
        ByteBuffer copy = ByteBuffer.allocate(length).order(ByteOrder.LITTLE_ENDIAN);
        long p = position;
        try {
            while (copy.hasRemaining()) {
                int seg = (int) (p / segmentBytes);
                int off = (int) (p - seg * segmentBytes);
                int n = (int) Math.min(copy.remaining(), segments[seg].capacity() - off);
                copy.put(segments[seg].slice(off, n));
                p += n;
            }
        } catch (InternalError e) {
            throw faulted(e);
        }
        return copy.flip().asReadOnlyBuffer().order(ByteOrder.LITTLE_ENDIAN);
    }

    /**
     * Whether {@link #slice(long, int)} of this range would avoid a copy.
     *
     * @param position first byte
     * @param length number of bytes
     * @return true if the range lies inside one segment
     */
    public boolean isContiguous(long position, int length) {
        check(position, length);
        if (length == 0) {
            return true;
        }
        int k = (int) (position / segmentBytes);
        return position - k * segmentBytes + length <= segments[k].capacity();
    }

    /**
     * Checks that a range is still backed by the file on disk (one {@code fstat}): a file truncated
     * after it was mapped makes reads of the lost pages fault, which the JVM reports as an
     * {@link InternalError}, in compiled code even after the read returned. Callers about to read a
     * range of a file that another process might shrink call this first.
     *
     * @param position first byte
     * @param length number of bytes
     * @throws UncheckedIOException around a {@link CorruptDatasetException} naming the file, its mapped
     *     size and its size on disk now, if the file no longer holds the range
     */
    public void requireOnDisk(long position, long length) {
        long now;
        try {
            now = channel.size();
        } catch (IOException e) {
            throw new UncheckedIOException("file " + path + ": cannot read its size: " + e.getMessage(), e);
        }
        if (now < position + length) {
            throw truncated(now + " bytes", null);
        }
    }

    /**
     * The exception for a read of this mapping that faulted ({@link InternalError}) because the file
     * shrank on disk after it was mapped.
     *
     * @param fault the error a read of this mapping (or of a view {@link #slice} returned) threw
     * @return an {@link UncheckedIOException} whose cause is a {@link CorruptDatasetException} naming
     *     the file, its mapped size and its size on disk now
     */
    public UncheckedIOException faulted(InternalError fault) {
        String now;
        try {
            now = Files.size(path) + " bytes";
        } catch (IOException e) {
            now = "unreadable (" + e.getMessage() + ")";
        }
        return truncated(now, fault);
    }

    private UncheckedIOException truncated(String now, Throwable fault) {
        CorruptDatasetException corrupt = new CorruptDatasetException(path, "it was truncated or replaced after it "
                + "was opened (mapped " + size + " bytes, on disk now " + now + ")");
        if (fault != null) {
            corrupt.initCause(fault);
        }
        return new UncheckedIOException(corrupt.getMessage(), corrupt);
    }

    private void check(long position, long length) {
        if (closed) {
            throw new IllegalStateException("file " + path + " is closed");
        }
        if (position < 0 || length < 0 || position > size - length) {
            throw new IndexOutOfBoundsException("file " + path + ": range [" + position + ", " + (position + length)
                    + ") is outside its " + size + " bytes");
        }
    }

    @Override
    public void close() throws IOException {
        closed = true;
        channel.close();
    }
}
