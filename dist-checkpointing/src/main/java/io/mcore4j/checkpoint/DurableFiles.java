package io.mcore4j.checkpoint;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.zip.CRC32C;

/**
 * File operations that survive a crash: write under a temporary name, force to disk, rename
 * atomically, force the directory. A reader therefore sees either the old file or the complete new one.
 */
final class DurableFiles {
    static final String TEMPORARY_SUFFIX = ".tmp";

    private DurableFiles() {}

    /** @return the temporary name a file is written under before its rename */
    static Path temporaryFor(Path target) {
        return target.resolveSibling(target.getFileName() + TEMPORARY_SUFFIX);
    }

    /**
     * Writes {@code bytes} to {@code target} atomically.
     *
     * @param target final path
     * @param bytes content
     * @param fsync whether to force the file and its directory to disk
     */
    static void writeAtomically(Path target, byte[] bytes, boolean fsync) throws IOException {
        Path temporary = temporaryFor(target);
        try (FileChannel ch = FileChannel.open(temporary, StandardOpenOption.CREATE, StandardOpenOption.WRITE,
                StandardOpenOption.TRUNCATE_EXISTING)) {
            ByteBuffer buffer = ByteBuffer.wrap(bytes);
            while (buffer.hasRemaining()) {
                ch.write(buffer);
            }
            if (fsync) {
                ch.force(true);
            }
        }
        moveAtomically(temporary, target, fsync);
    }

    /** Renames {@code from} to {@code to} in one step, replacing {@code to}; forces the directory if asked. */
    static void moveAtomically(Path from, Path to, boolean fsync) throws IOException {
        try {
            Files.move(from, to, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
        } catch (AtomicMoveNotSupportedException e) {
            throw new IOException("the file system of " + to.getParent()
                    + " cannot rename atomically, which crash-safe checkpoints need", e);
        }
        if (fsync) {
            fsyncDirectory(to.getParent());
        }
    }

    /**
     * Forces a directory's entries (new names, renames) to disk. Some platforms (Windows) cannot open a
     * directory for this; there the rename is as durable as the file system makes it.
     */
    static void fsyncDirectory(Path dir) {
        try (FileChannel ch = FileChannel.open(dir, StandardOpenOption.READ)) {
            ch.force(true);
        } catch (IOException | UnsupportedOperationException notSupported) {
            // best effort by design: see the method comment
        }
    }

    /** Deletes a directory tree; entries that vanish meanwhile are ignored. */
    static void deleteTree(Path root) throws IOException {
        if (!Files.exists(root)) {
            return;
        }
        if (Files.isDirectory(root) && !Files.isSymbolicLink(root)) {
            try (DirectoryStream<Path> entries = Files.newDirectoryStream(root)) {
                for (Path p : entries) {
                    deleteTree(p);
                }
            }
        }
        Files.deleteIfExists(root);
    }

    /**
     * CRC32C of a whole file, read in chunks through {@code buffer}.
     *
     * @param file the file
     * @param buffer scratch (a direct buffer reads fastest)
     * @return the checksum
     */
    static int crc32c(Path file, ByteBuffer buffer) throws IOException {
        CRC32C crc = new CRC32C();
        try (FileChannel ch = FileChannel.open(file, StandardOpenOption.READ)) {
            while (true) {
                buffer.clear();
                if (ch.read(buffer) < 0) {
                    break;
                }
                buffer.flip();
                crc.update(buffer);
            }
        }
        return (int) crc.getValue();
    }
}
