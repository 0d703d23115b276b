package io.mcore4j.checkpoint;

import io.mcore4j.checkpoint.json.Json;
import io.mcore4j.checkpoint.json.JsonException;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.SortedMap;
import java.util.TreeMap;

/**
 * The content of {@code mcore4j_metadata.json}: format version, the shard files with size and
 * CRC32C, every tensor with dtype, global shape and its shards, and the caller's common state.
 *
 * <p>Its presence marks a complete checkpoint: rank 0 writes it last, after every shard file is on
 * disk. The text is deterministic (sorted keys, shards sorted by offset, no timestamps), so two
 * saves of equal state give byte-identical files.
 *
 * <p>Beside it, rank 0 writes {@code metadata.json} in Megatron-Core's own form (its
 * {@code CheckpointingConfig}: {@code sharded_backend} and {@code common_backend}, here
 * {@code "mcore4j"}), so Megatron's tools see a distributed checkpoint of a backend they do not
 * have and refuse it by name, instead of failing on fields they do not know. Checkpoints of earlier
 * mcore4j versions kept this class's content in {@code metadata.json} itself; they are still read.
 */
record CheckpointMetadata(Map<String, Object> common, SortedMap<String, StoredFile> files,
                          SortedMap<String, StoredTensor> tensors) {

    static final String FILE_NAME = "mcore4j_metadata.json";
    /** Megatron-Core's checkpoint config file; earlier mcore4j versions kept the metadata itself there. */
    static final String MEGATRON_CONFIG = "metadata.json";
    /** The backend name the Megatron config gives for both the sharded tensors and the common state. */
    static final String MEGATRON_BACKEND = "mcore4j";
    static final String FORMAT = "mcore4j-dist-checkpoint";
    static final long VERSION = 1;
    static final String CHECKSUM = "crc32c";

    /** A shard file: name relative to the checkpoint directory, size in bytes, CRC32C of all its bytes. */
    record StoredFile(String name, long size, int crc32c) {
        String crcHex() {
            return String.format("%08x", crc32c);
        }
    }

    /** One stored piece of a tensor: the file, the tensor name inside it and the block of the global tensor. */
    record StoredShard(String file, String name, Box box) {}

    /** A tensor: its dtype, global shape and stored pieces (sorted by offset). */
    record StoredTensor(String key, SafetensorsDtype dtype, long[] shape, List<StoredShard> shards) {
        StoredTensor {
            shape = shape.clone();
            shards = List.copyOf(shards);
        }

        @Override
        public long[] shape() {
            return shape.clone();
        }
    }

    CheckpointMetadata {
        common = common == null ? Map.of() : common;
        files = new TreeMap<>(files);
        tensors = new TreeMap<>(tensors);
    }

    /** @return the pretty-printed JSON text, ending with a newline */
    String toJson() {
        Map<String, Object> root = new LinkedHashMap<>();
        root.put("format", FORMAT);
        root.put("version", VERSION);
        root.put("checksum", CHECKSUM);
        root.put("common", common);
        Map<String, Object> fileMap = new TreeMap<>();
        for (StoredFile f : files.values()) {
            fileMap.put(f.name(), Map.of("size", f.size(), CHECKSUM, f.crcHex()));
        }
        root.put("files", fileMap);
        Map<String, Object> tensorMap = new TreeMap<>();
        for (StoredTensor t : tensors.values()) {
            List<Object> shards = new ArrayList<>();
            for (StoredShard s : t.shards()) {
                shards.add(Map.of("file", s.file(), "name", s.name(), "offset", longs(s.box().offset()),
                        "shape", longs(s.box().shape())));
            }
            tensorMap.put(t.key(), Map.of("dtype", t.dtype().name(), "shape", longs(t.shape()), "shards", shards));
        }
        root.put("tensors", tensorMap);
        return Json.writePretty(root) + "\n";
    }

    /**
     * Reads and checks {@code dir/metadata.json}.
     *
     * @param dir a checkpoint directory
     * @return the metadata
     * @throws CorruptCheckpointException if the file is absent (incomplete save) or malformed
     * @throws IncompatibleCheckpointException if it was written by a newer format version
     */
    static CheckpointMetadata read(Path dir) {
        Path file = locate(dir);
        if (file == null) {
            throw new CorruptCheckpointException("no " + FILE_NAME + " in " + dir
                    + ": the directory is not a checkpoint or its save did not complete");
        }
        String text;
        try {
            text = Files.readString(file, StandardCharsets.UTF_8);
        } catch (IOException e) {
            throw new CorruptCheckpointException("cannot read " + file + ": " + e, e);
        }
        return parse(text, file);
    }

    /**
     * The file holding the metadata of a complete checkpoint in {@code dir}: {@link #FILE_NAME}, or
     * for a checkpoint of an earlier mcore4j version {@link #MEGATRON_CONFIG} when it holds this
     * format (recognised by the format name among its first bytes; Megatron's own config never
     * holds it).
     *
     * @param dir a directory
     * @return the file, or null if {@code dir} holds no complete checkpoint
     */
    static Path locate(Path dir) {
        Path file = dir.resolve(FILE_NAME);
        if (Files.isRegularFile(file)) {
            return file;
        }
        Path legacy = dir.resolve(MEGATRON_CONFIG);
        if (!Files.isRegularFile(legacy)) {
            return null;
        }
        byte[] head = new byte[4096];
        int n;
        try (InputStream in = Files.newInputStream(legacy)) {
            n = in.readNBytes(head, 0, head.length);
        } catch (IOException e) {
            throw new CorruptCheckpointException("cannot read " + legacy + ": " + e, e);
        }
        return new String(head, 0, n, StandardCharsets.UTF_8).contains("\"" + FORMAT + "\"") ? legacy : null;
    }

    /**
     * Writes Megatron's config, then this metadata, which marks the checkpoint complete.
     *
     * @param dir the checkpoint directory
     * @param fsync force each file to disk before its rename
     * @throws IOException if either cannot be written
     */
    void write(Path dir, boolean fsync) throws IOException {
        Map<String, Object> megatron = new LinkedHashMap<>();
        megatron.put("sharded_backend", MEGATRON_BACKEND);
        megatron.put("sharded_backend_version", VERSION);
        megatron.put("common_backend", MEGATRON_BACKEND);
        megatron.put("common_backend_version", VERSION);
        DurableFiles.writeAtomically(dir.resolve(MEGATRON_CONFIG),
                (Json.writePretty(megatron) + "\n").getBytes(StandardCharsets.UTF_8), fsync);
        DurableFiles.writeAtomically(dir.resolve(FILE_NAME), toJson().getBytes(StandardCharsets.UTF_8), fsync);
    }

    /**
     * Deletes the files that make {@code dir} look complete, the metadata first, so that a directory
     * being deleted or rewritten never does.
     *
     * @param dir a checkpoint directory
     * @return whether anything was deleted
     * @throws IOException if a file cannot be deleted
     */
    static boolean deleteMarkers(Path dir) throws IOException {
        boolean ours = Files.deleteIfExists(dir.resolve(FILE_NAME));
        return Files.deleteIfExists(dir.resolve(MEGATRON_CONFIG)) || ours;
    }

    static CheckpointMetadata parse(String text, Path file) {
        Object parsed;
        try {
            parsed = Json.parse(text);
        } catch (JsonException e) {
            throw new CorruptCheckpointException(file + " is not valid JSON (truncated or damaged?): " + e.getMessage(), e);
        }
        Fields root = new Fields(file, "$", parsed);
        String format = root.string("format");
        if (!FORMAT.equals(format)) {
            throw new CorruptCheckpointException(file + " has format \"" + format + "\", expected \"" + FORMAT + "\"");
        }
        long version = root.integer("version");
        if (version > VERSION) {
            throw new IncompatibleCheckpointException(file + " has format version " + version
                    + ", newer than version " + VERSION + " that this mcore4j reads; load it with a newer mcore4j");
        }
        if (version < 1) {
            throw new CorruptCheckpointException(file + " has format version " + version + "; versions start at 1");
        }
        String checksum = root.string("checksum");
        if (!CHECKSUM.equals(checksum)) {
            throw new CorruptCheckpointException(file + " uses checksum \"" + checksum + "\", expected \"" + CHECKSUM + "\"");
        }
        Map<String, Object> common = root.object("common").map();
        SortedMap<String, StoredFile> files = new TreeMap<>();
        Fields fileFields = root.object("files");
        for (String name : fileFields.map().keySet()) {
            Fields f = fileFields.object(name);
            long size = f.integer("size");
            String crc = f.string(CHECKSUM);
            if (!crc.matches("[0-9a-f]{8}")) {
                throw f.error(CHECKSUM + " \"" + crc + "\" is not 8 lowercase hex digits");
            }
            if (name.contains("/") || name.contains("\\") || name.startsWith(".")) {
                throw f.error("file name \"" + name + "\" must be a plain name inside the checkpoint directory");
            }
            files.put(name, new StoredFile(name, size, Integer.parseUnsignedInt(crc, 16)));
        }
        SortedMap<String, StoredTensor> tensors = new TreeMap<>();
        Map<String, String> readers = new HashMap<>(); // file and tensor name -> the shard that reads it
        Fields tensorFields = root.object("tensors");
        for (String key : tensorFields.map().keySet()) {
            Fields t = tensorFields.object(key);
            String dtypeName = t.string("dtype");
            SafetensorsDtype dtype = SafetensorsDtype.parseOrNull(dtypeName);
            if (dtype == null) {
                throw t.error("unknown dtype \"" + dtypeName + "\"");
            }
            long[] shape = t.longs("shape");
            List<StoredShard> shards = new ArrayList<>();
            List<Object> list = t.list("shards");
            for (int i = 0; i < list.size(); i++) {
                Fields s = new Fields(file, t.path + ".shards[" + i + "]", list.get(i));
                String shardFile = s.string("file");
                if (!files.containsKey(shardFile)) {
                    throw s.error("file \"" + shardFile + "\" is not listed under \"files\"");
                }
                Box box = new Box(s.longs("offset"), s.longs("shape"));
                if (!box.fitsIn(shape)) {
                    throw s.error("block " + box + " lies outside the global shape " + Arrays.toString(shape));
                }
                StoredShard shard = new StoredShard(shardFile, s.string("name"), box);
                String previous = readers.putIfAbsent(shardFile + "\u0000" + shard.name(), t.path + ".shards[" + i + "]");
                if (previous != null) {
                    throw s.error("reads tensor \"" + shard.name() + "\" of " + shardFile + ", which " + previous
                            + " reads too; each stored piece belongs to one shard");
                }
                shards.add(shard);
            }
            checkTiling(t, shape, shards);
            tensors.put(key, new StoredTensor(key, dtype, shape, shards));
        }
        return new CheckpointMetadata(common, files, tensors);
    }

    /**
     * Refuses a tensor whose shards do not cover it exactly once: a shard entry removed, doubled or
     * moved would otherwise load as silently wrong (or stale) weights, since a load copies whatever
     * overlaps its targets.
     */
    private static void checkTiling(Fields t, long[] shape, List<StoredShard> shards) {
        List<Box> boxes = shards.stream().map(StoredShard::box).toList();
        Tiling.Problem problem = Tiling.check(shape, boxes);
        if (problem instanceof Tiling.Overlap o) {
            StoredShard a = shards.get(o.first());
            StoredShard b = shards.get(o.second());
            throw t.error("shards " + a.box() + " (" + a.file() + ") and " + b.box() + " (" + b.file()
                    + ") both hold elements " + o.common() + " of global shape " + Arrays.toString(shape)
                    + "; the checkpoint is damaged");
        }
        if (problem instanceof Tiling.Gap g) {
            throw t.error("the shards leave a gap: " + g.describe() + " of global shape " + Arrays.toString(shape)
                    + " (" + g.covered() + " of " + g.total() + " elements covered); the checkpoint is damaged");
        }
    }

    private static List<Object> longs(long[] values) {
        List<Object> out = new ArrayList<>(values.length);
        for (long v : values) {
            out.add(v);
        }
        return out;
    }

    /** Typed access to one JSON object of the metadata; errors name the file and the path inside it. */
    private static final class Fields {
        private final Path file;
        private final String path;
        private final Map<String, Object> map;

        @SuppressWarnings("unchecked")
        Fields(Path file, String path, Object value) {
            this.file = file;
            this.path = path;
            if (!(value instanceof Map)) {
                throw new CorruptCheckpointException(file + ": " + path + " must be a JSON object");
            }
            this.map = (Map<String, Object>) value;
        }

        Map<String, Object> map() {
            return map;
        }

        CorruptCheckpointException error(String what) {
            return new CorruptCheckpointException(file + ": " + path + ": " + what);
        }

        private Object get(String name) {
            if (!map.containsKey(name)) {
                throw error("missing field \"" + name + "\"");
            }
            return map.get(name);
        }

        String string(String name) {
            if (get(name) instanceof String s) {
                return s;
            }
            throw error("field \"" + name + "\" must be a string");
        }

        long integer(String name) {
            if (get(name) instanceof Long l) {
                return l;
            }
            throw error("field \"" + name + "\" must be an integer");
        }

        Fields object(String name) {
            return new Fields(file, path + "." + name, get(name));
        }

        @SuppressWarnings("unchecked")
        List<Object> list(String name) {
            if (get(name) instanceof List<?> l) {
                return (List<Object>) l;
            }
            throw error("field \"" + name + "\" must be an array");
        }

        long[] longs(String name) {
            List<Object> l = list(name);
            long[] out = new long[l.size()];
            for (int i = 0; i < out.length; i++) {
                if (!(l.get(i) instanceof Long v) || v < 0) {
                    throw error("field \"" + name + "\" must hold non-negative integers, found " + l.get(i));
                }
                out[i] = v;
            }
            return out;
        }
    }
}
