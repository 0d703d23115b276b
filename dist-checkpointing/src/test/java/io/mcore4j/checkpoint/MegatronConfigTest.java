package io.mcore4j.checkpoint;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.checkpoint.json.Json;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Megatron-Core's tools meet an mcore4j checkpoint cleanly: its {@code metadata.json} is Megatron's
 * {@code CheckpointingConfig} with exactly that class's four fields (Megatron builds the class from
 * the file's keys, so one more key was a TypeError), naming the backend {@code mcore4j} that Megatron
 * then refuses by name. mcore4j's own metadata lives in {@code mcore4j_metadata.json}; checkpoints
 * of earlier versions, which kept it in {@code metadata.json}, still load. (Megatron-Core's
 * {@code check_is_distributed_checkpoint} reads {@code metadata.json} into
 * {@code CheckpointingConfig(sharded_backend, sharded_backend_version, common_backend,
 * common_backend_version)}; its load then looks up a strategy for the backend and finds none for
 * {@code mcore4j}.)
 */
class MegatronConfigTest {
    static final long[] SHAPE = {4, 6};

    @TempDir
    Path dir;

    @BeforeEach
    void saveTwoRanks() {
        InJvmWorld.run(2, rank -> {
            DistCheckpointing.save(dir, List.of(Blocks.shard(rank.manager(), "w", SHAPE,
                    new long[] {2L * rank.rank(), 0}, new long[] {2, 6}, 0)), Map.of("iteration", 5L),
                    rank.groups(ParallelDims.of(2, 1, 1)).world());
            return null;
        });
    }

    private List<Throwable> loadAll() {
        return InJvmWorld.run(2, rank -> {
            ShardedTensor t = Blocks.target(rank.manager(), "w", SHAPE, new long[2], SHAPE);
            try {
                DistCheckpointing.load(dir, List.of(t), rank.groups(ParallelDims.of(2, 1, 1)).world(),
                        StrictMode.RAISE_ALL);
            } catch (CheckpointException e) {
                return e;
            }
            Blocks.assertHoldsOriginal(t);
            return null;
        });
    }

    @Test
    void metadataJsonHoldsExactlyMegatronsCheckpointingConfig() throws IOException {
        Map<String, Object> expected = new LinkedHashMap<>();
        expected.put("sharded_backend", "mcore4j");
        expected.put("sharded_backend_version", 1L);
        expected.put("common_backend", "mcore4j");
        expected.put("common_backend_version", 1L);
        assertEquals(expected, Json.parse(Files.readString(dir.resolve("metadata.json"))));
        assertEquals(5L, DistCheckpointing.loadCommon(dir).get("iteration"));
    }

    @Test
    void megatronsConfigAloneIsNotACompleteCheckpoint() throws IOException {
        Files.delete(dir.resolve(CheckpointMetadata.FILE_NAME));
        assertFalse(DistCheckpointing.isComplete(dir));
        for (Throwable t : loadAll()) {
            assertInstanceOf(CorruptCheckpointException.class, t);
            assertTrue(t.getMessage().startsWith("no mcore4j_metadata.json in " + dir), t.getMessage());
        }
    }

    @Test
    void aCheckpointOfAnEarlierVersionStillLoads() throws IOException {
        // earlier versions wrote mcore4j's metadata as metadata.json and nothing else
        Files.move(dir.resolve(CheckpointMetadata.FILE_NAME), dir.resolve("metadata.json"),
                StandardCopyOption.REPLACE_EXISTING);
        assertTrue(DistCheckpointing.isComplete(dir));
        for (Throwable t : loadAll()) {
            if (t != null) {
                throw new AssertionError(t);
            }
        }
        assertEquals(5L, DistCheckpointing.loadCommon(dir).get("iteration"));
        // and saving over it replaces both files
        saveTwoRanks();
        assertTrue(Files.isRegularFile(dir.resolve(CheckpointMetadata.FILE_NAME)));
        assertEquals("mcore4j", ((Map<?, ?>) Json.parse(Files.readString(dir.resolve("metadata.json"))))
                .get("sharded_backend"));
    }
}
