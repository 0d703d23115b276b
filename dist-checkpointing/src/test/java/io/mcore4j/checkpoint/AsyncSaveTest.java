package io.mcore4j.checkpoint;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.stream.Collectors;
import java.util.stream.Stream;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Acceptance 3: an asynchronous save writes byte-identical files to a synchronous one, from a host snapshot. */
class AsyncSaveTest {
    @TempDir
    Path root;

    @Test
    void asyncFilesEqualSyncFilesEvenWhenTheModelChangesMeanwhile() throws IOException {
        Path sync = root.resolve("sync");
        Path async = root.resolve("async");
        InJvmWorld.run(8, rank -> {
            ProcessGroups g = rank.groups(ParallelDims.of(8, 2, 2));
            List<ShardedTensor> state = ModelStateTest.state(rank.manager(), ModelStateTest.Place.of(g), false);
            DistCheckpointing.save(sync, state, ModelStateTest.common(), g.world());

            // the writer thread may not start before the model has been overwritten
            CountDownLatch overwritten = new CountDownLatch(1);
            SaveOptions held = SaveOptions.defaults().withListener((file, written, total) -> await(overwritten));
            AsyncSave save = DistCheckpointing.saveAsync(async, state, ModelStateTest.common(), g.world(), held);
            for (ShardedTensor t : state) {
                NDArray zeros = t.data().zerosLike();
                Tensors.copyInto(t.data(), zeros);
                zeros.close();
            }
            overwritten.countDown();
            save.finish();
            save.finish(); // idempotent
            assertTrue(save.isWritten());
            return null;
        });
        List<String> names = fileNames(sync);
        assertEquals(names, fileNames(async));
        assertTrue(names.contains(CheckpointMetadata.FILE_NAME));
        // writers: the 4 DP-rank-0 ranks (TP x PP), plus DP rank 1 of stage 0 / TP 0, which holds experts 2-3
        assertEquals(5 + 2, names.size(), "five shard files, mcore4j_metadata.json and Megatron's metadata.json: " + names);
        for (String name : names) {
            assertArrayEquals(Files.readAllBytes(sync.resolve(name)), Files.readAllBytes(async.resolve(name)), name);
        }
    }

    @Test
    void finishRaisesAWriteFailureOnEveryRankAndLeavesNoMetadata() {
        Path dir = root.resolve("failing");
        List<String> messages = InJvmWorld.run(2, rank -> {
            ProcessGroups g = rank.groups(ParallelDims.of(2, 1, 1));
            List<ShardedTensor> state = List.of(Blocks.shard(rank.manager(), "w", new long[] {2, 8},
                    new long[] {rank.rank(), 0}, new long[] {1, 8}, 0));
            SaveOptions options = SaveOptions.defaults().withListener((file, written, total) -> {
                if (rank.rank() == 1) {
                    throw new IllegalStateException("disk full (simulated)");
                }
            });
            AsyncSave save = DistCheckpointing.saveAsync(dir, state, null, g.world(), options);
            try {
                save.finish();
                return "no failure";
            } catch (CheckpointException e) {
                return e.getMessage();
            }
        });
        for (String m : messages) {
            assertTrue(m.contains("disk full (simulated)") && m.contains("rank 1"), m);
        }
        assertFalse(DistCheckpointing.isComplete(dir));
    }

    private static void await(CountDownLatch latch) {
        try {
            latch.await();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    private static List<String> fileNames(Path dir) throws IOException {
        try (Stream<Path> files = Files.list(dir)) {
            return files.map(p -> p.getFileName().toString()).sorted().collect(Collectors.toList());
        }
    }
}
