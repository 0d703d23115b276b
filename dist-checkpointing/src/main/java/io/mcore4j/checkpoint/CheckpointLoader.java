package io.mcore4j.checkpoint;

import ai.djl.Device;
import ai.djl.ndarray.NDManager;
import io.mcore4j.checkpoint.CheckpointMetadata.StoredFile;
import io.mcore4j.checkpoint.CheckpointMetadata.StoredShard;
import io.mcore4j.checkpoint.CheckpointMetadata.StoredTensor;
import io.mcore4j.checkpoint.json.Json;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.parallel.Communicator;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.SortedSet;
import java.util.TreeSet;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One load. Collective steps over {@code world}, in order: (1) every rank reads
 * {@code mcore4j_metadata.json}, checks its targets' dtypes and shapes and shares the keys it wants, so all
 * ranks compute the same missing and unexpected keys; (2) optionally, the files holding wanted keys
 * are checksummed, spread round-robin over the ranks; (3) every rank copies the overlapping parts of
 * the stored shards into its targets. Each step ends with an agreement, so a failure anywhere is
 * raised everywhere.
 */
final class CheckpointLoader {
    private static final Logger LOG = LoggerFactory.getLogger(CheckpointLoader.class);
    private static final int LISTED_KEYS = 20;

    private CheckpointLoader() {}

    static LoadResult load(Path dir, List<ShardedTensor> targets, Communicator world, StrictMode strict,
                           LoadOptions options) {
        String step = "loading " + dir;
        CheckpointMetadata metadata = null;
        SortedSet<String> requested = new TreeSet<>();
        Throwable failure = null;
        try {
            metadata = CheckpointMetadata.read(dir);
            for (ShardedTensor t : targets) {
                requested.add(t.key());
                StoredTensor stored = metadata.tensors().get(t.key());
                if (stored != null) {
                    checkCompatible(t, stored, dir);
                }
            }
        } catch (RuntimeException e) {
            failure = e;
        }
        List<byte[]> gathered = RankAgreement.exchange(world, step,
                Json.write(new ArrayList<Object>(requested)).getBytes(StandardCharsets.UTF_8), failure);
        SortedSet<String> wanted = new TreeSet<>();
        for (byte[] keys : gathered) {
            for (Object k : (List<?>) Json.parse(new String(keys, StandardCharsets.UTF_8))) {
                wanted.add((String) k);
            }
        }
        List<String> missing = new ArrayList<>();
        for (String k : wanted) {
            if (!metadata.tensors().containsKey(k)) {
                missing.add(k);
            }
        }
        List<String> unexpected = new ArrayList<>();
        for (String k : metadata.tensors().keySet()) {
            if (!wanted.contains(k)) {
                unexpected.add(k);
            }
        }
        applyStrictMode(dir, strict, missing, unexpected, world.rank() == 0);

        if (options.verifyChecksums()) {
            Throwable verifyFailure = null;
            try {
                verify(dir, metadata, wanted, world.rank(), world.size());
            } catch (RuntimeException | IOException e) {
                verifyFailure = e;
            }
            RankAgreement.agree(world, "verifying the checksums of " + dir, verifyFailure);
        }

        Throwable readFailure = null;
        try {
            read(dir, metadata, targets, options);
        } catch (RuntimeException | IOException e) {
            readFailure = e instanceof IOException ? new CheckpointException("cannot read " + dir + ": " + e, e) : e;
        }
        RankAgreement.agree(world, step, readFailure);
        return new LoadResult(metadata.common(), missing, unexpected);
    }

    private static void checkCompatible(ShardedTensor t, StoredTensor stored, Path dir) {
        SafetensorsDtype dtype;
        try {
            dtype = SafetensorsDtype.of(t.dtype());
        } catch (IllegalArgumentException e) {
            throw new IncompatibleCheckpointException("key \"" + t.key() + "\": " + e.getMessage(), e);
        }
        if (dtype != stored.dtype() || !Arrays.equals(t.globalShape(), stored.shape())) {
            throw new IncompatibleCheckpointException("key \"" + t.key() + "\": the checkpoint in " + dir + " stores "
                    + stored.dtype() + " of global shape " + Arrays.toString(stored.shape()) + ", the load asks for "
                    + dtype + " of global shape " + Arrays.toString(t.globalShape()));
        }
    }

    private static void applyStrictMode(Path dir, StrictMode strict, List<String> missing, List<String> unexpected,
                                        boolean logs) {
        List<String> problems = new ArrayList<>();
        if (!missing.isEmpty() && strict.raisesMissing()) {
            problems.add(describe(missing.size(), "requested key", "missing from the checkpoint", missing));
        }
        if (!unexpected.isEmpty() && strict.raisesUnexpected()) {
            problems.add(describe(unexpected.size(), "stored key", "requested by no rank", unexpected));
        }
        if (!problems.isEmpty()) {
            throw new IncompatibleCheckpointException("loading " + dir + " under " + strict + ": "
                    + String.join("; ", problems));
        }
        if (logs && !missing.isEmpty() && strict.logsMissing()) {
            LOG.warn("loading {}: {}", dir, describe(missing.size(), "requested key", "missing from the checkpoint", missing));
        }
        if (logs && !unexpected.isEmpty() && strict.logsUnexpected()) {
            LOG.warn("loading {}: {}", dir, describe(unexpected.size(), "stored key", "requested by no rank", unexpected));
        }
    }

    private static String describe(int count, String noun, String what, List<String> keys) {
        List<String> shown = keys.subList(0, Math.min(keys.size(), LISTED_KEYS));
        return count + " " + noun + (count == 1 ? " is " : "s are ") + what + ": " + shown
                + (keys.size() > shown.size() ? " and " + (keys.size() - shown.size()) + " more" : "");
    }

    /** Checks size and CRC32C of the files this rank is assigned among those that hold wanted keys. */
    private static void verify(Path dir, CheckpointMetadata metadata, SortedSet<String> wanted, int rank, int size)
            throws IOException {
        SortedSet<String> files = new TreeSet<>();
        for (String key : wanted) {
            StoredTensor t = metadata.tensors().get(key);
            if (t != null) {
                for (StoredShard s : t.shards()) {
                    files.add(s.file());
                }
            }
        }
        ByteBuffer buffer = null;
        int i = 0;
        for (String name : files) {
            if (i++ % size != rank) {
                continue;
            }
            StoredFile expected = metadata.files().get(name);
            Path path = dir.resolve(name);
            checkSize(path, expected);
            if (buffer == null) {
                buffer = ByteBuffer.allocateDirect(4 << 20);
            }
            int crc = DurableFiles.crc32c(path, buffer);
            if (crc != expected.crc32c()) {
                throw new CorruptCheckpointException(path + " fails its CRC32C check: computed "
                        + String.format("%08x", crc) + ", " + CheckpointMetadata.FILE_NAME + " records "
                        + expected.crcHex() + " (the file is damaged)");
            }
        }
    }

    private static void checkSize(Path path, StoredFile expected) throws IOException {
        long actual;
        try {
            actual = Files.size(path);
        } catch (NoSuchFileException e) {
            throw new CorruptCheckpointException("shard file " + path + " listed in " + CheckpointMetadata.FILE_NAME
                    + " does not exist", e);
        }
        if (actual != expected.size()) {
            throw new CorruptCheckpointException(path + " is " + actual + " bytes but " + CheckpointMetadata.FILE_NAME
                    + " records " + expected.size() + (actual < expected.size() ? " (file truncated)" : " (file damaged)"));
        }
    }

    private static void read(Path dir, CheckpointMetadata metadata, List<ShardedTensor> targets, LoadOptions options)
            throws IOException {
        Mcore4j.ensureInitialized();
        Map<String, OpenShardFile> open = new HashMap<>();
        try (NDManager scratch = NDManager.newBaseManager(Device.cpu());
             PieceCopier copier = new PieceCopier(options.readChunkBytes(), scratch)) {
            for (ShardedTensor t : targets) {
                StoredTensor stored = metadata.tensors().get(t.key());
                if (stored == null) {
                    continue;
                }
                Box targetBox = new Box(t.globalOffset(), t.data().getShape().getShape());
                for (StoredShard shard : stored.shards()) {
                    Box piece = shard.box().intersect(targetBox);
                    if (piece == null) {
                        continue;
                    }
                    OpenShardFile file = open.get(shard.file());
                    if (file == null) {
                        file = OpenShardFile.open(dir.resolve(shard.file()), metadata.files().get(shard.file()));
                        open.put(shard.file(), file);
                    }
                    SafetensorsHeader.Entry entry = file.entry(shard, stored.dtype());
                    copier.copy(file.channel, file.label, file.header.dataStart() + entry.begin(), shard.box(),
                            stored.dtype(), piece, t.data(), targetBox);
                }
            }
        } finally {
            for (OpenShardFile f : open.values()) {
                f.channel.close();
            }
        }
    }

    /** An open shard file with its checked header. */
    private static final class OpenShardFile {
        final FileChannel channel;
        final String label;
        final SafetensorsHeader header;

        private OpenShardFile(FileChannel channel, String label, SafetensorsHeader header) {
            this.channel = channel;
            this.label = label;
            this.header = header;
        }

        static OpenShardFile open(Path path, StoredFile expected) throws IOException {
            checkSize(path, expected);
            FileChannel ch = FileChannel.open(path, StandardOpenOption.READ);
            try {
                return new OpenShardFile(ch, path.toString(), SafetensorsHeader.read(ch, expected.size(), path.toString()));
            } catch (RuntimeException | IOException e) {
                ch.close();
                throw e;
            }
        }

        SafetensorsHeader.Entry entry(StoredShard shard, SafetensorsDtype dtype) {
            SafetensorsHeader.Entry e = header.entry(shard.name());
            if (e == null) {
                throw new CorruptCheckpointException(label + " has no tensor \"" + shard.name() + "\" although "
                        + CheckpointMetadata.FILE_NAME + " lists it there");
            }
            if (e.dtype() != dtype || !Arrays.equals(e.shape(), shard.box().shape())) {
                throw new CorruptCheckpointException(label + ": tensor \"" + shard.name() + "\" is " + e.dtype() + " "
                        + Arrays.toString(e.shape()) + " but " + CheckpointMetadata.FILE_NAME + " says " + dtype + " "
                        + Arrays.toString(shard.box().shape()));
            }
            return e;
        }
    }
}
