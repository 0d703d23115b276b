package io.mcore4j.checkpoint;

import io.mcore4j.checkpoint.json.Json;
import io.mcore4j.checkpoint.json.JsonException;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * The safetensors header of a shard file: 8-byte little-endian length N, then N bytes of JSON
 * mapping each tensor name to dtype, shape and {@code data_offsets} (relative to the end of the
 * header), plus a {@code __metadata__} map of strings. The data section follows, tensors packed in
 * the order of their offsets. The JSON is padded with spaces so the data starts 8-byte aligned, as
 * the reference implementation does.
 *
 * <p>Public for reading: checkpoint loading and the Hugging Face bridge's import parse a file's
 * header through {@link #read} alone (one parser of the format).
 */
public final class SafetensorsHeader {
    /** The reference implementation refuses headers above 100 MB; so do we, before allocating. */
    static final long MAX_HEADER_BYTES = 100_000_000L;

    /**
     * One tensor entry; offsets are relative to the start of the data section.
     *
     * @param name the tensor's name
     * @param dtype its element type
     * @param shape its shape (copied)
     * @param begin first byte of its data, from the start of the data section
     * @param end one past its last byte
     */
    public record Entry(String name, SafetensorsDtype dtype, long[] shape, long begin, long end) {
        public Entry {
            shape = shape.clone();
        }

        @Override
        public long[] shape() {
            return shape.clone();
        }
    }

    private final List<Entry> entries;
    private final Map<String, Entry> byName;
    private final long dataStart;

    private SafetensorsHeader(List<Entry> entries, long dataStart) {
        this.entries = List.copyOf(entries);
        this.byName = new LinkedHashMap<>();
        for (Entry e : entries) {
            byName.put(e.name(), e);
        }
        this.dataStart = dataStart;
    }

    /** @return absolute file offset where the data section starts */
    public long dataStart() {
        return dataStart;
    }

    /** @return the entries, in data order */
    public List<Entry> entries() {
        return entries;
    }

    /**
     * @param name a tensor name
     * @return its entry, or null
     */
    public Entry entry(String name) {
        return byName.get(name);
    }

    /**
     * Lays out {@code tensors} (already in the order their data will follow) and encodes the header.
     *
     * @param tensors name, dtype and shape of each tensor; byte sizes follow from them
     * @param metadata the {@code __metadata__} strings
     * @return the encoded prefix (length, JSON, padding) and the entries with their offsets
     */
    static Encoded encode(List<Entry> tensors, Map<String, String> metadata) {
        Map<String, Object> json = new TreeMap<>();
        List<Entry> laidOut = new ArrayList<>();
        long offset = 0;
        for (Entry t : tensors) {
            long bytes = new Box(new long[t.shape().length], t.shape()).volume() * t.dtype().bytes();
            Entry placed = new Entry(t.name(), t.dtype(), t.shape(), offset, offset + bytes);
            if (json.put(t.name(), Map.of("dtype", t.dtype().name(), "shape", boxed(t.shape()),
                    "data_offsets", List.of(placed.begin(), placed.end()))) != null) {
                throw new IllegalArgumentException("two tensors named \"" + t.name() + "\" in one shard file");
            }
            laidOut.add(placed);
            offset += bytes;
        }
        if (json.containsKey("__metadata__")) {
            throw new IllegalArgumentException("a tensor cannot be named __metadata__");
        }
        json.put("__metadata__", new TreeMap<String, Object>(metadata));
        byte[] text = Json.write(json).getBytes(StandardCharsets.UTF_8);
        int padded = (8 + text.length + 7) / 8 * 8 - 8;
        ByteBuffer prefix = ByteBuffer.allocate(8 + padded).order(ByteOrder.LITTLE_ENDIAN);
        prefix.putLong(padded).put(text);
        while (prefix.hasRemaining()) {
            prefix.put((byte) ' ');
        }
        prefix.flip();
        return new Encoded(prefix, new SafetensorsHeader(laidOut, 8 + padded), offset);
    }

    /**
     * The bytes that start a shard file, the header they encode and the size of the data section.
     *
     * @param prefix length, JSON and padding, ready to write
     * @param header the parsed form
     * @param dataBytes bytes of tensor data that follow
     */
    record Encoded(ByteBuffer prefix, SafetensorsHeader header, long dataBytes) {}

    /**
     * Reads and checks the header of an open shard file.
     *
     * @param channel the file
     * @param fileSize its size
     * @param label the file's path, for errors
     * @return the header
     * @throws CorruptCheckpointException if the header is malformed or its data does not fit in the file
     */
    public static SafetensorsHeader read(FileChannel channel, long fileSize, String label) throws IOException {
        if (fileSize < 8) {
            throw new CorruptCheckpointException(label + " is " + fileSize + " bytes, too short for a safetensors header");
        }
        ByteBuffer lengthBytes = ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN);
        readFully(channel, lengthBytes, 0, label);
        long n = lengthBytes.getLong(0);
        if (n < 2 || n > MAX_HEADER_BYTES || n > fileSize - 8) {
            throw new CorruptCheckpointException(label + ": safetensors header length " + n
                    + " is impossible for a file of " + fileSize + " bytes");
        }
        ByteBuffer text = ByteBuffer.allocate((int) n);
        readFully(channel, text, 8, label);
        Object parsed;
        try {
            parsed = Json.parse(new String(text.array(), StandardCharsets.UTF_8));
        } catch (JsonException e) {
            throw new CorruptCheckpointException(label + ": safetensors header is not valid JSON: " + e.getMessage(), e);
        }
        if (!(parsed instanceof Map<?, ?> map)) {
            throw new CorruptCheckpointException(label + ": safetensors header is not a JSON object");
        }
        long dataBytes = fileSize - 8 - n;
        List<Entry> entries = new ArrayList<>();
        for (Map.Entry<?, ?> e : map.entrySet()) {
            String name = (String) e.getKey();
            if (name.equals("__metadata__")) {
                continue;
            }
            entries.add(parseEntry(name, e.getValue(), dataBytes, label));
        }
        entries.sort((a, b) -> Long.compare(a.begin(), b.begin()));
        return new SafetensorsHeader(entries, 8 + n);
    }

    private static Entry parseEntry(String name, Object value, long dataBytes, String label) {
        String where = label + ": tensor \"" + name + "\"";
        if (!(value instanceof Map<?, ?> m) || !(m.get("dtype") instanceof String dtypeName)
                || !(m.get("shape") instanceof List<?> shapeList) || !(m.get("data_offsets") instanceof List<?> offsets)
                || offsets.size() != 2 || !(offsets.get(0) instanceof Long begin) || !(offsets.get(1) instanceof Long end)) {
            throw new CorruptCheckpointException(where + " needs dtype, shape and two data_offsets");
        }
        SafetensorsDtype dtype = SafetensorsDtype.parseOrNull(dtypeName);
        if (dtype == null) {
            throw new CorruptCheckpointException(where + " has unsupported dtype \"" + dtypeName + "\"");
        }
        long[] shape = new long[shapeList.size()];
        for (int i = 0; i < shape.length; i++) {
            if (!(shapeList.get(i) instanceof Long s) || s < 0) {
                throw new CorruptCheckpointException(where + " has an invalid shape " + shapeList);
            }
            shape[i] = s;
        }
        long expected;
        try {
            expected = Math.multiplyExact(new Box(new long[shape.length], shape).volume(), dtype.bytes());
        } catch (ArithmeticException overflow) {
            throw new CorruptCheckpointException(where + " has a shape too large: " + Arrays.toString(shape));
        }
        if (begin < 0 || end < begin || end > dataBytes || end - begin != expected) {
            throw new CorruptCheckpointException(where + " has data_offsets [" + begin + ", " + end + "] but needs "
                    + expected + " bytes inside a data section of " + dataBytes + " bytes (file truncated?)");
        }
        return new Entry(name, dtype, shape, begin, end);
    }

    /** Reads exactly {@code buffer.remaining()} bytes at {@code position}. */
    static void readFully(FileChannel channel, ByteBuffer buffer, long position, String label) throws IOException {
        long at = position;
        while (buffer.hasRemaining()) {
            int n = channel.read(buffer, at);
            if (n < 0) {
                throw new CorruptCheckpointException(label + " ends at byte " + at + " but "
                        + buffer.remaining() + " more bytes were expected (file truncated)");
            }
            at += n;
        }
    }

    private static List<Object> boxed(long[] values) {
        List<Object> out = new ArrayList<>(values.length);
        for (long v : values) {
            out.add(v);
        }
        return out;
    }
}
