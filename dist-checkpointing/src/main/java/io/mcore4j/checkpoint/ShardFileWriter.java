package io.mcore4j.checkpoint;

import io.mcore4j.checkpoint.CheckpointMetadata.StoredFile;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.zip.CRC32C;

/**
 * Writes one rank's shard file: the safetensors header, then each tensor's bytes, computing the
 * CRC32C of the whole file on the way (so no second pass is needed), under a temporary name that is
 * renamed once the file is complete and forced to disk. Needs no native arrays: it only reads host
 * byte buffers, so it can run on a background thread.
 */
final class ShardFileWriter {
    /** Marker written into each file's {@code __metadata__}, so tools can tell where it came from. */
    static final Map<String, String> FILE_METADATA = Map.of("format", "pt", "producer", "mcore4j",
            "mcore4j_format_version", Long.toString(CheckpointMetadata.VERSION));

    /**
     * A tensor ready to write: its name in the file and its bytes in little-endian row-major order.
     *
     * @param name tensor name inside the file
     * @param dtype storage dtype
     * @param shape local shape
     * @param data exactly the tensor's bytes (position 0, limit = size); not modified
     */
    record PendingTensor(String name, SafetensorsDtype dtype, long[] shape, ByteBuffer data) {}

    private ShardFileWriter() {}

    /**
     * Writes {@code tensors} (sorted by name) to {@code dir/fileName}.
     *
     * @param dir checkpoint directory
     * @param fileName final file name
     * @param tensors the tensors
     * @param options fsync, chunking and listener
     * @return the file's name, size and checksum
     */
    static StoredFile write(Path dir, String fileName, List<PendingTensor> tensors, SaveOptions options) throws IOException {
        List<PendingTensor> sorted = new ArrayList<>(tensors);
        sorted.sort(Comparator.comparing(PendingTensor::name));
        List<SafetensorsHeader.Entry> entries = new ArrayList<>();
        for (PendingTensor t : sorted) {
            entries.add(new SafetensorsHeader.Entry(t.name(), t.dtype(), t.shape(), 0, 0));
        }
        SafetensorsHeader.Encoded encoded = SafetensorsHeader.encode(entries, FILE_METADATA);
        List<SafetensorsHeader.Entry> placed = encoded.header().entries();
        for (int i = 0; i < sorted.size(); i++) {
            long expected = placed.get(i).end() - placed.get(i).begin();
            if (sorted.get(i).data().remaining() != expected) {
                throw new IllegalStateException("tensor " + sorted.get(i).name() + " has "
                        + sorted.get(i).data().remaining() + " bytes of data, its shape needs " + expected);
            }
        }
        long total = encoded.prefix().remaining() + encoded.dataBytes();
        Path target = dir.resolve(fileName);
        Path temporary = DurableFiles.temporaryFor(target);
        CRC32C crc = new CRC32C();
        long written = 0;
        try (FileChannel ch = FileChannel.open(temporary, StandardOpenOption.CREATE, StandardOpenOption.WRITE,
                StandardOpenOption.TRUNCATE_EXISTING)) {
            written = writeChunked(ch, encoded.prefix(), crc, written, total, temporary, options);
            for (PendingTensor t : sorted) {
                written = writeChunked(ch, t.data(), crc, written, total, temporary, options);
            }
            if (options.fsync()) {
                ch.force(true);
            }
        }
        DurableFiles.moveAtomically(temporary, target, options.fsync());
        return new StoredFile(fileName, written, (int) crc.getValue());
    }

    private static long writeChunked(FileChannel ch, ByteBuffer source, CRC32C crc, long written, long total,
                                     Path temporary, SaveOptions options) throws IOException {
        ByteBuffer data = source.duplicate();
        int chunk = options.writeChunkBytes();
        while (data.hasRemaining()) {
            ByteBuffer piece = data.slice(data.position(), Math.min(chunk, data.remaining()));
            crc.update(piece.duplicate());
            while (piece.hasRemaining()) {
                written += ch.write(piece);
            }
            data.position(data.position() + piece.capacity());
            options.listener().onProgress(temporary, written, total);
        }
        return written;
    }
}
