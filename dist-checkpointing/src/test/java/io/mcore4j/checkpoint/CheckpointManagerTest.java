package io.mcore4j.checkpoint;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.stream.Collectors;
import java.util.stream.Stream;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Acceptance 5 (rotation): iteration directories, the latest marker and keep-last-N. */
class CheckpointManagerTest {
    static final long[] SHAPE = {2, 8};

    @TempDir
    Path root;

    private static List<ShardedTensor> state(InJvmWorld.Rank rank, long iteration) {
        return List.of(Blocks.shard(rank.manager(), "w" + iteration, SHAPE, new long[] {rank.rank(), 0},
                new long[] {1, 8}, 0));
    }

    private List<String> entries() throws IOException {
        try (Stream<Path> s = Files.list(root)) {
            return s.map(p -> p.getFileName().toString()).sorted().collect(Collectors.toList());
        }
    }

    @Test
    void keepsTheLastTwoAndMarksTheNewest() throws IOException {
        CheckpointManager probe = new CheckpointManager(root, 2);
        assertEquals(Optional.empty(), probe.latest());
        // leftovers of an interrupted save older than everything: rotation removes them too
        Files.createDirectories(probe.directoryFor(5));
        Files.writeString(probe.directoryFor(5).resolve("rank_00000.safetensors.tmp"), "partial");

        InJvmWorld.run(2, rank -> {
            Communicator world = rank.groups(ParallelDims.of(2, 1, 1)).world();
            CheckpointManager manager = new CheckpointManager(root, 2);
            for (long iteration : new long[] {10, 20}) {
                manager.save(iteration, state(rank, iteration), Map.of("iteration", iteration), world);
            }
            for (long iteration : new long[] {30, 40}) {
                manager.saveAsync(iteration, state(rank, iteration), Map.of("iteration", iteration), world);
            }
            manager.finishPending();
            return null;
        });
        assertEquals(List.of("iter_0000030", "iter_0000040", "latest"), entries());
        assertEquals(probe.directoryFor(40), probe.latest().orElseThrow());
        assertEquals(List.of(30L, 40L), probe.completeIterations());
        assertEquals("40\n", Files.readString(root.resolve(CheckpointManager.LATEST_MARKER)));
        assertEquals(40L, DistCheckpointing.loadCommon(probe.latest().orElseThrow()).get("iteration"));
    }

    @Test
    void saveDirectoriesListsIterationsAndInterruptedSavesOnly() throws IOException {
        CheckpointManager manager = new CheckpointManager(root, 2);
        assertEquals(List.of(), manager.saveDirectories());
        for (String name : List.of("iter_0000002", "iter_0000003.saving", "iter_0000001.replaced", "iter_notes", "other")) {
            Files.createDirectories(root.resolve(name));
        }
        Files.writeString(root.resolve("iter_0000004"), "a file, not a save");
        assertEquals(List.of(root.resolve("iter_0000001.replaced"), root.resolve("iter_0000002"),
                root.resolve("iter_0000003.saving")), manager.saveDirectories());
    }

    @Test
    void withoutAMarkerTheNewestCompleteDirectoryIsLatest() {
        CheckpointManager manager = new CheckpointManager(root, 1);
        InJvmWorld.run(2, rank -> {
            Communicator world = rank.groups(ParallelDims.of(2, 1, 1)).world();
            DistCheckpointing.save(manager.directoryFor(3), state(rank, 3), null, world);
            DistCheckpointing.save(manager.directoryFor(12), state(rank, 12), null, world);
            return null;
        });
        assertEquals(manager.directoryFor(12), manager.latest().orElseThrow());
        // and commit() marks one explicitly, rotating the other away
        InJvmWorld.run(2, rank -> {
            manager.commit(12, rank.groups(ParallelDims.of(2, 1, 1)).world());
            return null;
        });
        assertFalse(Files.exists(manager.directoryFor(3)));
        assertEquals(manager.directoryFor(12), manager.latest().orElseThrow());
    }

    @Test
    void aMarkerNamingAnIncompleteDirectoryIsReported() throws IOException {
        CheckpointManager manager = new CheckpointManager(root, 1);
        Files.createDirectories(manager.directoryFor(7));
        Files.writeString(root.resolve(CheckpointManager.LATEST_MARKER), "7\n");
        CorruptCheckpointException e = assertThrows(CorruptCheckpointException.class, manager::latest);
        assertTrue(e.getMessage().contains("iter_0000007"), e.getMessage());
    }

    @Test
    void directoryNamesAndArguments() {
        CheckpointManager manager = new CheckpointManager(root, 3);
        assertEquals(root.resolve("iter_0000100"), manager.directoryFor(100));
        assertEquals(root.resolve("iter_123456789"), manager.directoryFor(123_456_789));
        assertThrows(IllegalArgumentException.class, () -> new CheckpointManager(root, 0));
        assertThrows(IllegalArgumentException.class, () -> manager.directoryFor(-1));
        assertTrue(manager.completeIterations().isEmpty());
    }
}
