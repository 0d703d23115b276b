package io.mcore4j.checkpoint;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDManager;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Acceptance 1: tensors A [2, 4] and B [4, 5, 80] saved at TP2 x PP4 load bit for bit at TP1 x PP1,
 * TP1 x PP2 and TP4 x PP2.
 *
 * <p>Sharding at save: A is split along dim 1 over TP and replicated over PP (pipeline ranks other
 * than 0 hold non-main replicas); B is split along dim 0 over PP and along dim 2 over TP. Every
 * load target starts filled with 1234.5, a value the data never has.
 */
class ReshardingTest {
    static final long[] A = {2, 4};
    static final long[] B = {4, 5, 80};

    @TempDir
    static Path dir;

    @BeforeAll
    static void saveAtTp2Pp4() {
        InJvmWorld.run(8, rank -> {
            ProcessGroups g = rank.groups(ParallelDims.of(8, 2, 4));
            int tp = g.tensorParallelRank();
            int pp = g.pipelineRank();
            NDManager m = rank.manager();
            List<ShardedTensor> state = List.of(
                    Blocks.shard(m, "A", A, new long[] {0, 2L * tp}, new long[] {2, 2}, pp),
                    Blocks.shard(m, "B", B, new long[] {pp, 0, 40L * tp}, new long[] {1, 5, 40}, 0));
            DistCheckpointing.save(dir, state, Map.of("iteration", 7L), g.world());
            return null;
        });
    }

    @Test
    void savedOneFilePerRankAndMetadata() {
        for (int r = 0; r < 8; r++) {
            assertTrue(Files.isRegularFile(dir.resolve(ShardEntry.fileName(r))), "rank " + r + " wrote its file");
        }
        assertTrue(DistCheckpointing.isComplete(dir));
        CheckpointMetadata metadata = CheckpointMetadata.read(dir);
        assertEquals(2, metadata.tensors().get("A").shards().size(), "only PP rank 0 writes A");
        assertEquals(8, metadata.tensors().get("B").shards().size());
        assertEquals(7L, DistCheckpointing.loadCommon(dir).get("iteration"));
    }

    @Test
    void loadsUnshardedOnOneRank() {
        InJvmWorld.run(1, rank -> {
            NDManager m = rank.manager();
            List<ShardedTensor> targets = List.of(
                    Blocks.target(m, "A", A, new long[2], A),
                    Blocks.target(m, "B", B, new long[3], B));
            LoadResult result = DistCheckpointing.load(dir, targets, rank.groups(ParallelDims.of(1, 1, 1)).world(),
                    StrictMode.RAISE_ALL);
            targets.forEach(Blocks::assertHoldsOriginal);
            assertEquals(7L, result.common().get("iteration"));
            return null;
        });
    }

    @Test
    void loadsAtTp1Pp2() {
        InJvmWorld.run(2, rank -> {
            ProcessGroups g = rank.groups(ParallelDims.of(2, 1, 2));
            int pp = g.pipelineRank();
            NDManager m = rank.manager();
            List<ShardedTensor> targets = List.of(
                    Blocks.target(m, "A", A, new long[2], A),
                    Blocks.target(m, "B", B, new long[] {2L * pp, 0, 0}, new long[] {2, 5, 80}));
            DistCheckpointing.load(dir, targets, g.world(), StrictMode.RAISE_ALL);
            targets.forEach(Blocks::assertHoldsOriginal);
            return null;
        });
    }

    @Test
    void loadsAtTp4Pp2() {
        InJvmWorld.run(8, rank -> {
            ProcessGroups g = rank.groups(ParallelDims.of(8, 4, 2));
            int tp = g.tensorParallelRank();
            int pp = g.pipelineRank();
            NDManager m = rank.manager();
            List<ShardedTensor> targets = new ArrayList<>();
            targets.add(Blocks.target(m, "A", A, new long[] {0, tp}, new long[] {2, 1}));
            targets.add(Blocks.target(m, "B", B, new long[] {2L * pp, 0, 20L * tp}, new long[] {2, 5, 20}));
            DistCheckpointing.load(dir, targets, g.world(), StrictMode.RAISE_ALL);
            targets.forEach(Blocks::assertHoldsOriginal);
            return null;
        });
    }

    @Test
    void smallStagingChunksGiveTheSameBlocks() {
        // 7-byte staging forces one slab per row and the windowed reader for short runs
        InJvmWorld.run(2, rank -> {
            NDManager m = rank.manager();
            long[] offset = {rank.rank() == 0 ? 0 : 1, 1, 3};
            List<ShardedTensor> targets = List.of(Blocks.target(m, "B", B, offset, new long[] {3, 3, 71}));
            DistCheckpointing.load(dir, targets, rank.groups(ParallelDims.of(2, 1, 1)).world(), StrictMode.RETURN_ALL,
                    LoadOptions.defaults().withReadChunkBytes(7));
            targets.forEach(Blocks::assertHoldsOriginal);
            return null;
        });
    }
}
