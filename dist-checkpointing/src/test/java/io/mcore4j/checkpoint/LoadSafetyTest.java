package io.mcore4j.checkpoint;

import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.io.IOException;
import java.io.RandomAccessFile;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.function.Function;

import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Acceptance 4 (load side): a checkpoint that is incomplete, damaged, truncated, newer, or does not
 * match the requested shapes and dtypes is refused on every rank with an error naming the file or key.
 */
class LoadSafetyTest {
    static final long[] SHAPE = {4, 64};

    @TempDir
    Path dir;

    @BeforeEach
    void saveTwoRanks() {
        InJvmWorld.run(2, rank -> {
            NDManager m = rank.manager();
            DistCheckpointing.save(dir, List.of(
                    Blocks.shard(m, "w", SHAPE, new long[] {2L * rank.rank(), 0}, new long[] {2, 64}, 0)),
                    null, rank.groups(ParallelDims.of(2, 1, 1)).world());
            return null;
        });
    }

    /** Loads the whole of "w" (or what {@code targets} builds) on 2 ranks; returns each rank's failure. */
    private List<Throwable> loadAll(Function<NDManager, ShardedTensor> target) {
        return InJvmWorld.run(2, rank -> {
            try {
                DistCheckpointing.load(dir, List.of(target.apply(rank.manager())),
                        rank.groups(ParallelDims.of(2, 1, 1)).world(), StrictMode.RAISE_ALL);
                return null;
            } catch (CheckpointException e) {
                return e;
            }
        });
    }

    private List<Throwable> loadAll() {
        return loadAll(m -> Blocks.target(m, "w", SHAPE, new long[2], SHAPE));
    }

    private static void assertEveryRank(List<Throwable> failures, Class<? extends Throwable> type, String... words) {
        for (int r = 0; r < failures.size(); r++) {
            Throwable t = failures.get(r);
            assertInstanceOf(type, t, "rank " + r);
            for (String w : words) {
                assertTrue(t.getMessage().contains(w), "rank " + r + " message lacks \"" + w + "\": " + t.getMessage());
            }
        }
    }

    @Test
    void intactCheckpointLoads() {
        InJvmWorld.run(2, rank -> {
            ShardedTensor t = Blocks.target(rank.manager(), "w", SHAPE, new long[2], SHAPE);
            DistCheckpointing.load(dir, List.of(t), rank.groups(ParallelDims.of(2, 1, 1)).world(), StrictMode.RAISE_ALL);
            Blocks.assertHoldsOriginal(t);
            return null;
        });
    }

    @Test
    void aFlippedByteFailsTheChecksumNamingTheFile() throws IOException {
        Path file = dir.resolve("rank_00001.safetensors");
        try (RandomAccessFile f = new RandomAccessFile(file.toFile(), "rw")) {
            long at = f.length() - 100;
            f.seek(at);
            int b = f.read();
            f.seek(at);
            f.write(b ^ 0x10);
        }
        assertEveryRank(loadAll(), CorruptCheckpointException.class, file.toString(), "CRC32C");
    }

    @Test
    void aTruncatedFileIsRefusedNamingTheFile() throws IOException {
        Path file = dir.resolve("rank_00000.safetensors");
        try (RandomAccessFile f = new RandomAccessFile(file.toFile(), "rw")) {
            f.setLength(f.length() - 17);
        }
        assertEveryRank(loadAll(), CorruptCheckpointException.class, file.toString(), "truncated");
    }

    @Test
    void truncationIsCaughtEvenWithoutChecksums() throws IOException {
        Path file = dir.resolve("rank_00000.safetensors");
        try (RandomAccessFile f = new RandomAccessFile(file.toFile(), "rw")) {
            f.setLength(f.length() - 17);
        }
        List<Throwable> failures = InJvmWorld.run(2, rank -> {
            try {
                DistCheckpointing.load(dir, List.of(Blocks.target(rank.manager(), "w", SHAPE, new long[2], SHAPE)),
                        rank.groups(ParallelDims.of(2, 1, 1)).world(), StrictMode.RAISE_ALL,
                        LoadOptions.defaults().withVerifyChecksums(false));
                return null;
            } catch (CheckpointException e) {
                return e;
            }
        });
        assertEveryRank(failures, CorruptCheckpointException.class, file.toString(), "truncated");
    }

    @Test
    void aMissingShardFileIsRefusedNamingTheFile() throws IOException {
        Path file = dir.resolve("rank_00001.safetensors");
        Files.delete(file);
        assertEveryRank(loadAll(), CorruptCheckpointException.class, file.toString(), "does not exist");
    }

    @Test
    void aDirectoryWithoutMetadataIsRefused() throws IOException {
        Files.delete(dir.resolve(CheckpointMetadata.FILE_NAME));
        assertEveryRank(loadAll(), CorruptCheckpointException.class, "no mcore4j_metadata.json in " + dir, "did not complete");
    }

    @Test
    void aTruncatedMetadataFileIsRefusedNamingIt() throws IOException {
        Path metadata = dir.resolve(CheckpointMetadata.FILE_NAME);
        String text = Files.readString(metadata);
        Files.writeString(metadata, text.substring(0, text.length() / 2));
        assertEveryRank(loadAll(), CorruptCheckpointException.class, metadata.toString(), "not valid JSON", "line");
    }

    @Test
    void aNewerFormatVersionIsRefusedNamingTheFile() throws IOException {
        Path metadata = dir.resolve(CheckpointMetadata.FILE_NAME);
        String text = Files.readString(metadata, StandardCharsets.UTF_8);
        assertTrue(text.contains("\"version\": 1"), text);
        Files.writeString(metadata, text.replace("\"version\": 1", "\"version\": 2"));
        assertEveryRank(loadAll(), IncompatibleCheckpointException.class, metadata.toString(), "format version 2");
    }

    @Test
    void aGlobalShapeMismatchNamesTheKeyAndBothShapes() {
        assertEveryRank(loadAll(m -> Blocks.target(m, "w", new long[] {4, 32}, new long[2], new long[] {4, 32})),
                IncompatibleCheckpointException.class, "\"w\"", "[4, 64]", "[4, 32]");
    }

    @Test
    void aDtypeMismatchNamesTheKeyAndBothDtypes() {
        assertEveryRank(loadAll(m -> Blocks.target(m, "w", SHAPE, new long[2], SHAPE, DataType.FLOAT16)),
                IncompatibleCheckpointException.class, "\"w\"", "F32", "F16");
    }
}
