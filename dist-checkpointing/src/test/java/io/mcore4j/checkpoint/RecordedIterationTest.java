package io.mcore4j.checkpoint;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.checkpoint.json.Json;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The iteration a checkpoint records is checked against the directory that holds it (and so against
 * the {@code latest} marker): a checkpoint of iteration 3 whose common state was edited to say 7, or
 * whose directory was renamed, is refused on every rank instead of resuming at the wrong iteration
 * and skipping (or repeating) iterations without a word.
 */
class RecordedIterationTest {
    static final long[] SHAPE = {2, 8};

    @TempDir
    Path root;

    @BeforeEach
    void saveIterationsOneToThree() {
        InJvmWorld.run(2, rank -> {
            Communicator world = rank.groups(ParallelDims.of(2, 1, 1)).world();
            CheckpointManager manager = new CheckpointManager(root, 5);
            for (long iteration = 1; iteration <= 3; iteration++) {
                manager.save(iteration, state(rank), Map.of("consumed_samples", 4 * iteration), world);
            }
            return null;
        });
    }

    private static List<ShardedTensor> state(InJvmWorld.Rank rank) {
        return List.of(Blocks.shard(rank.manager(), "w", SHAPE, new long[] {rank.rank(), 0}, new long[] {1, 8}, 0));
    }

    /** Loads the latest checkpoint on 2 ranks; returns each rank's failure, or its recorded iteration. */
    private List<Object> loadLatest() {
        return InJvmWorld.run(2, rank -> {
            try {
                LoadResult r = new CheckpointManager(root, 5).loadLatest(
                        List.of(Blocks.target(rank.manager(), "w", SHAPE, new long[2], SHAPE)),
                        rank.groups(ParallelDims.of(2, 1, 1)).world(), StrictMode.RAISE_ALL).orElseThrow();
                return r.requireLong(CheckpointManager.ITERATION_KEY);
            } catch (CheckpointException e) {
                return e;
            }
        });
    }

    @Test
    void everySaveRecordsItsIterationAndAnIntactCheckpointLoads() {
        assertEquals(2L, DistCheckpointing.loadCommonState(new CheckpointManager(root, 5).directoryFor(2))
                .getLong(CheckpointManager.ITERATION_KEY));
        assertEquals(List.of(3L, 3L), loadLatest());
    }

    @Test
    @SuppressWarnings("unchecked")
    void anEditedIterationIsRefused() throws IOException {
        Path metadata = new CheckpointManager(root, 5).directoryFor(3).resolve(CheckpointMetadata.FILE_NAME);
        Map<String, Object> parsed = (Map<String, Object>) Json.parse(Files.readString(metadata));
        ((Map<String, Object>) parsed.get("common")).put(CheckpointManager.ITERATION_KEY, 7L);
        Files.writeString(metadata, Json.writePretty(parsed));
        for (Object outcome : loadLatest()) {
            CorruptCheckpointException e = assertInstanceOf(CorruptCheckpointException.class, outcome);
            assertTrue(e.getMessage().startsWith(metadata + " records iteration = 7 but the directory iter_0000003 is"
                    + " the checkpoint of iteration 3"), e.getMessage());
        }
    }

    @Test
    void aRenamedDirectoryIsRefused() throws IOException {
        CheckpointManager manager = new CheckpointManager(root, 5);
        Files.move(manager.directoryFor(3), manager.directoryFor(5));
        Files.writeString(root.resolve(CheckpointManager.LATEST_MARKER), "5\n");
        for (Object outcome : loadLatest()) {
            CorruptCheckpointException e = assertInstanceOf(CorruptCheckpointException.class, outcome);
            assertTrue(e.getMessage().contains("records iteration = 3 but the directory iter_0000005 is the checkpoint"
                    + " of iteration 5"), e.getMessage());
        }
    }

    @Test
    void aSaveWhoseCommonStateNamesAnotherIterationIsRefused() {
        List<Object> outcomes = InJvmWorld.run(2, rank -> {
            try {
                new CheckpointManager(root, 5).save(4, state(rank), Map.of(CheckpointManager.ITERATION_KEY, 9L),
                        rank.groups(ParallelDims.of(2, 1, 1)).world());
                return null;
            } catch (IllegalArgumentException e) {
                return e.getMessage();
            }
        });
        assertEquals(List.of("the common state records iteration = 9 but the save is of iteration 4",
                "the common state records iteration = 9 but the save is of iteration 4"), outcomes);
        assertThrows(IllegalArgumentException.class, () -> new CheckpointManager(root, 5).directoryFor(-1));
    }
}
