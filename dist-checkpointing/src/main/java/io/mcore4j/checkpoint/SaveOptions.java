package io.mcore4j.checkpoint;

import java.util.Objects;

/**
 * Options of a save; every rank of one save must pass equal options.
 *
 * @param fsync force each shard file and {@code mcore4j_metadata.json} to disk before renaming them, and
 *     the directory after (default true; turning it off trades crash safety for speed)
 * @param writeChunkBytes size of the writes a shard file is cut into (default 8 MiB)
 * @param listener called after each chunk (default {@link ShardWriteListener#NONE})
 */
public record SaveOptions(boolean fsync, int writeChunkBytes, ShardWriteListener listener) {
    /** Default chunk size, 8 MiB. */
    public static final int DEFAULT_WRITE_CHUNK_BYTES = 8 << 20;

    /**
     * @throws IllegalArgumentException if the chunk size is not positive
     */
    public SaveOptions {
        if (writeChunkBytes <= 0) {
            throw new IllegalArgumentException("write chunk size " + writeChunkBytes + " must be positive");
        }
        Objects.requireNonNull(listener, "listener");
    }

    /** @return fsync on, 8 MiB chunks, no listener */
    public static SaveOptions defaults() {
        return new SaveOptions(true, DEFAULT_WRITE_CHUNK_BYTES, ShardWriteListener.NONE);
    }

    /**
     * @param on whether to fsync
     * @return a copy with that setting
     */
    public SaveOptions withFsync(boolean on) {
        return new SaveOptions(on, writeChunkBytes, listener);
    }

    /**
     * @param bytes chunk size
     * @return a copy with that setting
     */
    public SaveOptions withWriteChunkBytes(int bytes) {
        return new SaveOptions(fsync, bytes, listener);
    }

    /**
     * @param l the listener
     * @return a copy with that setting
     */
    public SaveOptions withListener(ShardWriteListener l) {
        return new SaveOptions(fsync, writeChunkBytes, l);
    }
}
