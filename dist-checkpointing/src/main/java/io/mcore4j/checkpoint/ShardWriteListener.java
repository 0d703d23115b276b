package io.mcore4j.checkpoint;

import java.nio.file.Path;

/**
 * Observes the writing of one shard file, for progress reports and fault-injection tests.
 *
 * <p>Called on the thread that writes (a background thread for an async save) after each chunk of
 * at most {@link SaveOptions#writeChunkBytes()} bytes has been handed to the file system. The file
 * is still under its temporary name; it is renamed to its final name only after the last byte is
 * written and forced to disk. A listener that throws fails the save.
 */
@FunctionalInterface
public interface ShardWriteListener {
    /** A listener that does nothing. */
    ShardWriteListener NONE = (file, written, total) -> { };

    /**
     * @param temporaryFile the file being written (its temporary name)
     * @param bytesWritten bytes written so far, header included
     * @param totalBytes the file's final size
     */
    void onProgress(Path temporaryFile, long bytesWritten, long totalBytes);
}
