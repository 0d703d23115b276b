package io.mcore4j.checkpoint;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import java.util.stream.Stream;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Acceptance 5 (crash): a JVM killed in the middle of writing checkpoint B leaves checkpoint A as
 * the latest one, loadable and intact; saving B again afterwards succeeds.
 */
class CrashSafetyTest {
    @TempDir
    Path root;

    @Test
    void aWriterKilledMidSaveLeavesThePreviousCheckpointLoadable() throws Exception {
        String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
        List<String> command = new ArrayList<>(List.of(java, "-Dai.djl.offline=true", "-Dai.djl.pytorch.num_threads=1",
                "-Dai.djl.pytorch.num_interop_threads=1", "-Dorg.slf4j.simpleLogger.defaultLogLevel=error", "-Xmx512m",
                "-cp", System.getProperty("java.class.path"), CrashingSave.class.getName(), root.toString()));
        Process child = new ProcessBuilder(command).redirectErrorStream(true).start();
        String output = new String(child.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(child.waitFor(120, TimeUnit.SECONDS), "child did not end");
        assertEquals(CrashingSave.HALTED, child.exitValue(), "child should halt mid-write; output:\n" + output);

        CheckpointManager manager = new CheckpointManager(root, 3);
        Path iterationB = manager.directoryFor(2);
        assertEquals(manager.directoryFor(1), manager.latest().orElseThrow());
        assertFalse(DistCheckpointing.isComplete(iterationB), "B must not look complete");
        Path stagedB = manager.stagingDirectoryFor(2);
        assertFalse(DistCheckpointing.isComplete(stagedB), "B's staging directory must not look complete");
        assertTrue(names(stagedB).stream().anyMatch(n -> n.endsWith(".tmp")),
                "the halted writer's partial file stays under its temporary name: " + names(stagedB));

        // A is intact: load it at another layout (one rank) and compare with the values A was built from
        InJvmWorld.run(1, rank -> {
            NDArray data = rank.manager().zeros(new Shape(CrashingSave.SHAPE));
            ShardedTensor target = new ShardedTensor("w", data, CrashingSave.SHAPE, new long[2], 0);
            LoadResult result = manager.loadLatest(List.of(target), rank.groups(ParallelDims.of(1, 1, 1)).world(),
                    StrictMode.RAISE_ALL).orElseThrow();
            assertEquals("A", result.common().get("name"));
            assertArrayEquals(Blocks.block("A", CrashingSave.SHAPE, new long[2], CrashingSave.SHAPE), data.toFloatArray());
            return null;
        });

        // the restarted job saves B again; the interrupted attempt's staging directory is cleared first
        InJvmWorld.run(2, rank -> {
            CheckpointManager m = new CheckpointManager(root, 3);
            m.save(2, CrashingSave.state(rank, "B"), Map.of("name", "B"), rank.groups(ParallelDims.of(2, 1, 1)).world());
            return null;
        });
        assertEquals(iterationB, manager.latest().orElseThrow());
        assertEquals(List.of("mcore4j_metadata.json", "metadata.json", "rank_00000.safetensors", "rank_00001.safetensors"), names(iterationB));
        assertEquals("B", DistCheckpointing.loadCommon(iterationB).get("name"));
    }

    private static List<String> names(Path dir) throws IOException {
        try (Stream<Path> files = Files.list(dir)) {
            return files.map(p -> p.getFileName().toString()).sorted().collect(Collectors.toList());
        }
    }
}
