package io.mcore4j.checkpoint;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;
import java.util.stream.Stream;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Reliability (issue 22, items 1 and 9): re-saving the iteration just loaded never loses it, a
 * marker naming an incomplete directory falls back to the newest older complete checkpoint, and a
 * common block without a required entry is refused naming the entry.
 */
class ResaveReliabilityTest {
    static final long[] SHAPE = {4, 8};

    @TempDir
    Path root;

    /** Rank r's rows 2r, 2r+1 of tensor "w", holding the values of global tensor {@code name}. */
    private static List<ShardedTensor> state(InJvmWorld.Rank rank, String name) {
        long[] offset = {2L * rank.rank(), 0};
        ShardedTensor values = Blocks.shard(rank.manager(), name, SHAPE, offset, new long[] {2, SHAPE[1]}, 0);
        return List.of(new ShardedTensor("w", values.data(), SHAPE, offset, 0));
    }

    private static Communicator world(InJvmWorld.Rank rank) {
        return rank.groups(ParallelDims.of(2, 1, 1)).world();
    }

    private List<String> entries() throws IOException {
        try (Stream<Path> s = Files.list(root)) {
            return s.map(p -> p.getFileName().toString()).sorted().collect(Collectors.toList());
        }
    }

    /** Loads the latest checkpoint on one rank and checks it holds global tensor {@code name}. */
    private void assertLatestHolds(CheckpointManager manager, long iteration, String name) {
        assertEquals(manager.directoryFor(iteration), manager.latest().orElseThrow());
        InJvmWorld.run(1, rank -> {
            NDArray data = rank.manager().zeros(new Shape(SHAPE));
            ShardedTensor target = new ShardedTensor("w", data, SHAPE, new long[2], 0);
            LoadResult result = manager.loadLatest(List.of(target), rank.groups(ParallelDims.of(1, 1, 1)).world(),
                    StrictMode.RAISE_ALL).orElseThrow();
            assertEquals(name, result.common().get("name"));
            assertEquals(iteration, result.requireLong("iteration"));
            assertArrayEquals(Blocks.block(name, SHAPE, new long[2], SHAPE), data.toFloatArray());
            return null;
        });
    }

    @Test
    void aFailedReSaveOfTheLoadedIterationLeavesItLoadable() throws IOException {
        InJvmWorld.run(2, rank -> {
            CheckpointManager m = new CheckpointManager(root, 2);
            m.save(4, state(rank, "A"), Map.of("iteration", 4L, "name", "A"), world(rank));
            m.save(8, state(rank, "B"), Map.of("iteration", 8L, "name", "B"), world(rank));
            return null;
        });
        // --load X --save X at the loaded iteration: the re-save of 8 fails half-way (a full disk)
        SaveOptions diskFull = SaveOptions.defaults().withWriteChunkBytes(16).withListener((file, written, total) -> {
            if (written >= total / 2) {
                throw new IllegalStateException("No space left on device (simulated)");
            }
        });
        InJvmWorld.run(2, rank -> {
            CheckpointManager m = new CheckpointManager(root, 2);
            assertThrows(RuntimeException.class,
                    () -> m.save(8, state(rank, "C"), Map.of("iteration", 8L, "name", "C"), world(rank), diskFull));
            return null;
        });
        CheckpointManager manager = new CheckpointManager(root, 2);
        assertLatestHolds(manager, 8, "B");

        // the next successful re-save replaces 8 and cleans up the failed attempt's staging directory
        InJvmWorld.run(2, rank -> {
            new CheckpointManager(root, 2).save(8, state(rank, "C"), Map.of("iteration", 8L, "name", "C"), world(rank));
            return null;
        });
        assertLatestHolds(manager, 8, "C");
        assertEquals(List.of("iter_0000004", "iter_0000008", "latest"), entries());
    }

    @Test
    void aMarkerNamingAnIncompleteDirectoryFallsBackToTheNewestOlderCheckpoint() throws IOException {
        InJvmWorld.run(2, rank -> {
            CheckpointManager m = new CheckpointManager(root, 2);
            m.save(4, state(rank, "A"), Map.of("iteration", 4L, "name", "A"), world(rank));
            m.save(8, state(rank, "B"), Map.of("iteration", 8L, "name", "B"), world(rank));
            return null;
        });
        CheckpointManager manager = new CheckpointManager(root, 2);
        // what an old-style in-place re-save killed after deleting the metadata left behind
        Files.delete(manager.directoryFor(8).resolve(CheckpointMetadata.FILE_NAME));
        assertEquals(List.of(4L), manager.completeIterations());
        assertLatestHolds(manager, 4, "A");
    }

    @Test
    void aReSaveInterruptedBetweenItsRenamesKeepsTheOnlyCopy() throws IOException {
        InJvmWorld.run(2, rank -> {
            new CheckpointManager(root, 1).save(8, state(rank, "B"), Map.of("iteration", 8L, "name", "B"), world(rank));
            return null;
        });
        CheckpointManager manager = new CheckpointManager(root, 1);
        Path replaced = root.resolve("iter_0000008" + CheckpointManager.REPLACED_SUFFIX);
        Files.move(manager.directoryFor(8), replaced);
        // a later save's commit must not delete the only complete copy of iteration 8
        InJvmWorld.run(2, rank -> {
            new CheckpointManager(root, 1).save(9, state(rank, "C"), Map.of("iteration", 9L, "name", "C"), world(rank));
            return null;
        });
        assertTrue(DistCheckpointing.isComplete(replaced), entries().toString());
        assertLatestHolds(manager, 9, "C");
    }

    @Test
    void aCommonBlockWithoutTheIterationIsRefusedNamingIt() {
        LoadResult noIteration = new LoadResult(Map.of("consumed_samples", 64L), List.of(), List.of());
        CorruptCheckpointException e = assertThrows(CorruptCheckpointException.class,
                () -> noIteration.requireLong("iteration"));
        assertTrue(e.getMessage().contains("'iteration'") && e.getMessage().contains("consumed_samples"), e.getMessage());
        LoadResult text = new LoadResult(Map.of("iteration", "eight"), List.of(), List.of());
        e = assertThrows(CorruptCheckpointException.class, () -> text.requireLong("iteration"));
        assertTrue(e.getMessage().contains("iteration = eight"), e.getMessage());
        assertEquals(8L, new LoadResult(Map.of("iteration", 8.0), List.of(), List.of()).requireLong("iteration"));
    }
}
