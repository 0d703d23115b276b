package io.mcore4j.data.gpt;

import java.io.IOException;
import java.nio.ByteOrder;
import java.nio.IntBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;

/**
 * A read-only int array held either on the heap (just built) or in a memory-mapped cache file (loaded),
 * so that index arrays larger than the heap can be used after a restart.
 */
abstract class IndexArray {
    /** Ints per mapped segment: 1 GiB. */
    private static final long SEGMENT_INTS = 1L << 28;

    abstract long length();

    abstract int get(long index);

    static IndexArray of(int[] values) {
        return new IndexArray() {
            @Override
            long length() {
                return values.length;
            }

            @Override
            int get(long index) {
                return values[(int) index];
            }
        };
    }

    /**
     * Maps {@code count} little-endian ints starting at {@code offset}. The channel is closed at once: a
     * mapping stays valid without it and is released when collected.
     */
    static IndexArray map(Path file, long offset, long count) throws IOException {
        try (FileChannel channel = FileChannel.open(file, StandardOpenOption.READ)) {
            int segmentCount = (int) ((count + SEGMENT_INTS - 1) / SEGMENT_INTS);
            IntBuffer[] segments = new IntBuffer[segmentCount];
            for (int k = 0; k < segmentCount; k++) {
                long ints = Math.min(SEGMENT_INTS, count - k * SEGMENT_INTS);
                segments[k] = channel.map(FileChannel.MapMode.READ_ONLY, offset + 4 * k * SEGMENT_INTS, 4 * ints)
                        .order(ByteOrder.LITTLE_ENDIAN).asIntBuffer();
            }
            return new IndexArray() {
                @Override
                long length() {
                    return count;
                }

                @Override
                int get(long index) {
                    if (index < 0 || index >= count) {
                        throw new IndexOutOfBoundsException("index " + index + " is outside [0, " + count + ") of " + file);
                    }
                    return segments[(int) (index / SEGMENT_INTS)].get((int) (index % SEGMENT_INTS));
                }
            };
        }
    }
}
