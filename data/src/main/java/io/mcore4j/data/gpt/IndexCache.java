package io.mcore4j.data.gpt;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.List;
import java.util.Optional;

/**
 * Stores the int arrays behind a dataset as {@code <dir>/<base>.<hash>.<name>.bin}, where the hash is taken
 * over a text that describes everything the arrays depend on; {@code <base>.<hash>.description.txt} holds
 * that text and is written last, so its presence marks a complete entry.
 *
 * <p>Each array file is an 8-byte magic {@code MC4JIDX1}, an int64 element count and the little-endian
 * int32 elements. Files are written to a temporary name in the same directory and renamed, so concurrent
 * builders (several ranks, or a crash half-way) never expose a partial file. An entry that fails to load
 * (truncated, wrong magic, wrong description) is rebuilt.
 */
final class IndexCache {
    private static final Logger LOG = LoggerFactory.getLogger(IndexCache.class);
    private static final byte[] MAGIC = "MC4JIDX1".getBytes(StandardCharsets.US_ASCII);
    private static final int HEADER = 16;

    private final Path directory;
    private final String base;

    /**
     * @param directory where the files live
     * @param base file-name prefix, usually the dataset prefix's file name
     */
    IndexCache(Path directory, String base) {
        this.directory = directory;
        this.base = base;
    }

    static String hash(String description) {
        try {
            byte[] digest = MessageDigest.getInstance("SHA-256").digest(description.getBytes(StandardCharsets.UTF_8));
            return HexFormat.of().formatHex(digest, 0, 16);
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("SHA-256 is required by every JDK", e);
        }
    }

    Path file(String description, String name) {
        return directory.resolve(base + "." + hash(description) + "." + name);
    }

    /** The cached arrays for this description, mapped, or empty if the entry is missing or unusable. */
    Optional<List<IndexArray>> load(String description, List<String> names) {
        Path descriptionFile = file(description, "description.txt");
        try {
            if (!Files.isRegularFile(descriptionFile)
                    || !Files.readString(descriptionFile, StandardCharsets.UTF_8).equals(description)) {
                return Optional.empty();
            }
            List<IndexArray> arrays = new ArrayList<>();
            for (String name : names) {
                Path path = file(description, name + ".bin");
                long size = Files.size(path);
                ByteBuffer header = ByteBuffer.allocate(HEADER).order(ByteOrder.LITTLE_ENDIAN);
                try (FileChannel channel = FileChannel.open(path, StandardOpenOption.READ)) {
                    while (header.hasRemaining() && channel.read(header) >= 0) {
                        // read until the header is complete or the file ends
                    }
                }
                header.flip();
                byte[] magic = new byte[MAGIC.length];
                if (header.remaining() < HEADER) {
                    LOG.warn("cache file {} is truncated; rebuilding", path);
                    return Optional.empty();
                }
                header.get(magic);
                long count = header.getLong();
                if (!Arrays.equals(magic, MAGIC) || count < 0 || size != HEADER + 4 * count) {
                    LOG.warn("cache file {} is corrupt (size {}, count {}); rebuilding", path, size, count);
                    return Optional.empty();
                }
                arrays.add(IndexArray.map(path, HEADER, count));
            }
            return Optional.of(arrays);
        } catch (IOException e) {
            LOG.warn("cannot read cache entry {}: {}; rebuilding", descriptionFile, e.toString());
            return Optional.empty();
        }
    }

    /** Writes the arrays and then the description, each atomically. */
    void store(String description, List<String> names, List<int[]> arrays) throws IOException {
        Files.createDirectories(directory);
        for (int k = 0; k < names.size(); k++) {
            int[] values = arrays.get(k);
            Path target = file(description, names.get(k) + ".bin");
            Path temp = Files.createTempFile(directory, target.getFileName().toString(), ".tmp");
            try {
                try (FileChannel out = FileChannel.open(temp, StandardOpenOption.WRITE, StandardOpenOption.TRUNCATE_EXISTING)) {
                    ByteBuffer buffer = ByteBuffer.allocate(1 << 20).order(ByteOrder.LITTLE_ENDIAN);
                    buffer.put(MAGIC).putLong(values.length);
                    for (int v : values) {
                        if (buffer.remaining() < 4) {
                            drain(out, buffer);
                        }
                        buffer.putInt(v);
                    }
                    drain(out, buffer);
                    out.force(false);
                }
                move(temp, target);
            } finally {
                Files.deleteIfExists(temp);
            }
        }
        Path target = file(description, "description.txt");
        Path temp = Files.createTempFile(directory, target.getFileName().toString(), ".tmp");
        try {
            Files.writeString(temp, description, StandardCharsets.UTF_8);
            move(temp, target);
        } finally {
            Files.deleteIfExists(temp);
        }
    }

    private static void drain(FileChannel out, ByteBuffer buffer) throws IOException {
        buffer.flip();
        while (buffer.hasRemaining()) {
            out.write(buffer);
        }
        buffer.clear();
    }

    private static void move(Path from, Path to) throws IOException {
        try {
            Files.move(from, to, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
        } catch (AtomicMoveNotSupportedException e) {
            Files.move(from, to, StandardCopyOption.REPLACE_EXISTING);
        }
    }
}
