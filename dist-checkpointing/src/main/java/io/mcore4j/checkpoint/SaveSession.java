package io.mcore4j.checkpoint;

import ai.djl.Device;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import io.mcore4j.checkpoint.CheckpointMetadata.StoredFile;
import io.mcore4j.checkpoint.CheckpointMetadata.StoredShard;
import io.mcore4j.checkpoint.CheckpointMetadata.StoredTensor;
import io.mcore4j.checkpoint.ShardFileWriter.PendingTensor;
import io.mcore4j.checkpoint.json.Json;
import io.mcore4j.checkpoint.json.JsonException;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.parallel.Communicator;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.SortedMap;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;

/**
 * One save, from the declaration of shards to {@code mcore4j_metadata.json}. The collective steps, in the
 * order every rank runs them over {@code world}:
 * <ol>
 *   <li>all ranks exchange their shard entries; rank 0 validates coverage, snapshots the common
 *       state and clears stale files from the directory; the verdict is agreed by all ranks;</li>
 *   <li>each rank stages its main replicas as host bytes (a copy when asynchronous) and writes its
 *       file, inline or on a background thread;</li>
 *   <li>in {@link #finish()}, ranks exchange their file records (or failures); rank 0 writes
 *       {@code mcore4j_metadata.json}; the outcome is agreed by all ranks.</li>
 * </ol>
 */
final class SaveSession {
    private final Path dir;
    private final Communicator world;
    private final SaveOptions options;
    /** Rank 0 only: validated main replicas per key, and the common state as it was at save time. */
    private final Map<String, List<ShardEntry>> mains;
    private final Map<String, Object> common;
    private final CompletableFuture<StoredFile> written;

    private SaveSession(Path dir, Communicator world, SaveOptions options, Map<String, List<ShardEntry>> mains,
                        Map<String, Object> common, CompletableFuture<StoredFile> written) {
        this.dir = dir;
        this.world = world;
        this.options = options;
        this.mains = mains;
        this.common = common;
        this.written = written;
    }

    static SaveSession start(Path dir, List<ShardedTensor> state, Map<String, Object> common, Communicator world,
                             SaveOptions options, boolean async) {
        requireLittleEndian();
        int rank = world.rank();
        String step = "saving " + dir;

        List<ShardEntry> local = new ArrayList<>();
        Throwable failure = null;
        try {
            for (ShardedTensor t : state) {
                local.add(describe(t, rank));
            }
        } catch (RuntimeException e) {
            failure = e;
        }
        List<byte[]> gathered = RankAgreement.exchange(world, step, failure == null ? ShardEntry.encode(local) : new byte[0],
                failure);

        Map<String, List<ShardEntry>> mains = null;
        Map<String, Object> commonSnapshot = null;
        Throwable verdict = null;
        if (rank == 0) {
            try {
                List<ShardEntry> all = new ArrayList<>();
                for (int r = 0; r < gathered.size(); r++) {
                    all.addAll(ShardEntry.decode(gathered.get(r), r));
                }
                mains = ShardCoverage.validate(all);
                commonSnapshot = snapshot(common);
                clearDirectory(dir, options.fsync());
            } catch (RuntimeException | IOException e) {
                verdict = e instanceof IOException ? new CheckpointException("cannot prepare " + dir + ": " + e, e) : e;
            }
        }
        RankAgreement.agree(world, step, verdict);

        CompletableFuture<StoredFile> written = new CompletableFuture<>();
        Mcore4j.ensureInitialized();
        NDManager staging = NDManager.newBaseManager(Device.cpu());
        List<PendingTensor> pending = new ArrayList<>();
        try {
            for (int i = 0; i < state.size(); i++) {
                ShardedTensor t = state.get(i);
                if (t.isMainReplica()) {
                    ShardEntry e = local.get(i);
                    pending.add(new PendingTensor(e.tensorName(), e.dtype(), e.box().shape(),
                            hostBytes(t.data(), staging, async)));
                }
            }
        } catch (RuntimeException e) {
            staging.close();
            written.completeExceptionally(e);
            return new SaveSession(dir, world, options, mains, commonSnapshot, written);
        }
        Runnable write = () -> {
            StoredFile file = null;
            Throwable error = null;
            try {
                file = pending.isEmpty() ? null : ShardFileWriter.write(dir, ShardEntry.fileName(rank), pending, options);
            } catch (Throwable e) {
                error = e;
            } finally {
                staging.close();
            }
            if (error == null) {
                written.complete(file);
            } else {
                written.completeExceptionally(error);
            }
        };
        if (async) {
            Thread writer = new Thread(write, "checkpoint-writer-rank-" + rank);
            writer.setDaemon(true);
            writer.start();
        } else {
            write.run();
        }
        return new SaveSession(dir, world, options, mains, commonSnapshot, written);
    }

    Path directory() {
        return dir;
    }

    boolean isWritten() {
        return written.isDone();
    }

    /** Waits for this rank's file, then runs the collective that writes {@code mcore4j_metadata.json}. */
    void finish() {
        StoredFile file = null;
        Throwable failure = null;
        try {
            file = written.get();
        } catch (ExecutionException e) {
            failure = e.getCause() instanceof IOException io
                    ? new CheckpointException("cannot write the shard file of rank " + world.rank() + " in " + dir + ": " + io, io)
                    : e.getCause();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            failure = e;
        }
        byte[] payload = Json.write(file == null ? null
                : Map.of("name", file.name(), "size", file.size(), "crc", (long) file.crc32c()))
                .getBytes(StandardCharsets.UTF_8);
        List<byte[]> files = RankAgreement.exchange(world, "writing the shard files of " + dir, payload, failure);

        Throwable verdict = null;
        if (world.rank() == 0) {
            try {
                metadata(files).write(dir, options.fsync());
            } catch (RuntimeException | IOException e) {
                verdict = e instanceof IOException ? new CheckpointException("cannot write the metadata of " + dir + ": " + e, e) : e;
            }
        }
        RankAgreement.agree(world, "writing " + CheckpointMetadata.FILE_NAME + " of " + dir, verdict);
    }

    private CheckpointMetadata metadata(List<byte[]> files) {
        SortedMap<String, StoredFile> stored = new TreeMap<>();
        for (byte[] bytes : files) {
            if (Json.parse(new String(bytes, StandardCharsets.UTF_8)) instanceof Map<?, ?> m) {
                String name = (String) m.get("name");
                stored.put(name, new StoredFile(name, (Long) m.get("size"), ((Long) m.get("crc")).intValue()));
            }
        }
        SortedMap<String, StoredTensor> tensors = new TreeMap<>();
        for (Map.Entry<String, List<ShardEntry>> e : mains.entrySet()) {
            List<StoredShard> shards = new ArrayList<>();
            SafetensorsDtype dtype = null;
            long[] shape = null;
            for (ShardEntry s : e.getValue()) {
                String fileName = ShardEntry.fileName(s.rank());
                if (!stored.containsKey(fileName)) {
                    throw new CheckpointException("rank " + s.rank() + " holds a main replica of \"" + e.getKey()
                            + "\" but wrote no file");
                }
                shards.add(new StoredShard(fileName, s.tensorName(), s.box()));
                dtype = s.dtype();
                shape = s.globalShape();
            }
            if (dtype != null) {
                tensors.put(e.getKey(), new StoredTensor(e.getKey(), dtype, shape, shards));
            }
        }
        return new CheckpointMetadata(common, stored, tensors);
    }

    private static ShardEntry describe(ShardedTensor t, int rank) {
        try {
            return ShardEntry.of(t, rank);
        } catch (IllegalArgumentException e) {
            throw new InvalidShardingException("key \"" + t.key() + "\": " + e.getMessage(), e);
        }
    }

    /** A deep, JSON-normalised copy, so the caller may change its map while an async save runs. */
    @SuppressWarnings("unchecked")
    private static Map<String, Object> snapshot(Map<String, Object> common) {
        if (common == null) {
            return new LinkedHashMap<>();
        }
        try {
            return (Map<String, Object>) Json.parse(Json.write(common));
        } catch (JsonException e) {
            throw new CheckpointException("the common state cannot be stored as JSON: "
                    + e.getMessage().replaceFirst("^\\$", "common"), e);
        }
    }

    /**
     * Removes what a previous or interrupted save left in {@code dir}, metadata first, so that the
     * directory never looks complete while it is being rewritten. Other files are left alone.
     */
    private static void clearDirectory(Path dir, boolean fsync) throws IOException {
        Files.createDirectories(dir);
        if (CheckpointMetadata.deleteMarkers(dir) && fsync) {
            DurableFiles.fsyncDirectory(dir);
        }
        try (DirectoryStream<Path> entries = Files.newDirectoryStream(dir)) {
            for (Path p : entries) {
                String name = p.getFileName().toString();
                String base = name.endsWith(DurableFiles.TEMPORARY_SUFFIX)
                        ? name.substring(0, name.length() - DurableFiles.TEMPORARY_SUFFIX.length()) : name;
                if (ShardEntry.isShardFileName(base) || base.equals(CheckpointMetadata.FILE_NAME)
                        || base.equals(CheckpointMetadata.MEGATRON_CONFIG)) {
                    Files.deleteIfExists(p);
                }
            }
        }
    }

    /**
     * The bytes of {@code data} in row-major order on the host, valid until {@code owner} closes:
     * a view of the tensor's own memory when possible, or (with {@code copy}, or when the tensor is
     * on a device or not contiguous) of a host copy owned by {@code owner}.
     */
    private static ByteBuffer hostBytes(NDArray data, NDManager owner, boolean copy) {
        if (data.size() == 0) {
            return ByteBuffer.allocate(0);
        }
        NDArray host = Tensors.detach(data, owner);
        boolean onHost = host.getDevice().equals(Device.cpu());
        if (!onHost) {
            host = DataTypes.toDevice(host, Device.cpu(), true);
            host.attach(owner);
        }
        NDArray flat = host.flatten(); // a view of a contiguous tensor, a contiguous copy otherwise
        flat.attach(owner);
        if (copy && onHost) {
            flat = flat.duplicate();
            flat.attach(owner);
        }
        return flat.toByteBuffer(true).order(ByteOrder.LITTLE_ENDIAN);
    }

    private static void requireLittleEndian() {
        if (ByteOrder.nativeOrder() != ByteOrder.LITTLE_ENDIAN) {
            throw new UnsupportedOperationException("checkpoints store little-endian data; this platform is "
                    + ByteOrder.nativeOrder());
        }
    }
}
