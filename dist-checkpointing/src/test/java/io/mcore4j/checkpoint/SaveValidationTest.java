package io.mcore4j.checkpoint;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDManager;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Date;
import java.util.List;
import java.util.Map;
import java.util.function.BiFunction;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Acceptance 4 (save side): overlaps, gaps and inconsistent declarations fail on every rank and leave no metadata. */
class SaveValidationTest {
    static final long[] SHAPE = {4, 6};

    @TempDir
    Path dir;

    /** Saves on {@code world} ranks and returns what each rank threw (null if nothing). */
    private List<Throwable> saveAll(int world, BiFunction<NDManager, Integer, List<ShardedTensor>> state,
                                    Map<String, Object> common) {
        return InJvmWorld.run(world, rank -> {
            try {
                DistCheckpointing.save(dir, state.apply(rank.manager(), rank.rank()), common,
                        rank.groups(ParallelDims.of(world, 1, 1)).world());
                return null;
            } catch (CheckpointException e) {
                return e;
            }
        });
    }

    private void assertEveryRankFailed(List<Throwable> failures, Class<? extends Throwable> type, String... words) {
        for (int r = 0; r < failures.size(); r++) {
            Throwable t = failures.get(r);
            assertInstanceOf(type, t, "rank " + r);
            for (String w : words) {
                assertTrue(t.getMessage().contains(w), "rank " + r + " message lacks \"" + w + "\": " + t.getMessage());
            }
        }
        assertFalse(Files.exists(dir.resolve(CheckpointMetadata.FILE_NAME)), "a failed save left metadata.json");
    }

    @Test
    void twoMainReplicasOfOneShardAreRefused() {
        List<Throwable> failures = saveAll(3, (m, r) -> List.of(
                Blocks.shard(m, "decoder.weight", SHAPE, new long[] {r == 2 ? 2 : 0, 0}, new long[] {2, 6}, 0)), null);
        assertEveryRankFailed(failures, InvalidShardingException.class, "\"decoder.weight\"", "overlap", "rank 0", "rank 1");
    }

    @Test
    void partialOverlapIsRefused() {
        List<Throwable> failures = saveAll(2, (m, r) -> List.of(r == 0
                ? Blocks.shard(m, "w", SHAPE, new long[] {0, 0}, new long[] {4, 4}, 0)
                : Blocks.shard(m, "w", SHAPE, new long[] {0, 3}, new long[] {4, 3}, 0)), null);
        assertEveryRankFailed(failures, InvalidShardingException.class, "\"w\"", "overlap in [0:4, 3:4]");
    }

    @Test
    void aGapIsRefused() {
        // rank 1's half is marked as a replica, so nobody writes columns 3-5
        List<Throwable> failures = saveAll(2, (m, r) -> List.of(
                Blocks.shard(m, "w", SHAPE, new long[] {0, 3L * r}, new long[] {4, 3}, r)), null);
        assertEveryRankFailed(failures, InvalidShardingException.class, "\"w\"", "cover 12 of 24", "gap");
    }

    @Test
    void aKeyWithOnlyReplicasIsRefused() {
        List<Throwable> failures = saveAll(2, (m, r) -> List.of(
                Blocks.shard(m, "a", SHAPE, new long[2], SHAPE, 0),
                Blocks.shard(m, "b", SHAPE, new long[2], SHAPE, 1 + r)).subList(r == 0 ? 1 : 0, 2), null);
        // rank 0 declares only b (replica), rank 1 declares a (main) and b (replica)
        assertEveryRankFailed(failures, InvalidShardingException.class, "\"b\"", "no rank holds a main replica");
    }

    @Test
    void ranksDisagreeingOnAGlobalShapeAreRefused() {
        List<Throwable> failures = saveAll(2, (m, r) -> List.of(r == 0
                ? Blocks.shard(m, "w", SHAPE, new long[] {0, 0}, new long[] {2, 6}, 0)
                : Blocks.shard(m, "w", new long[] {4, 7}, new long[] {2, 0}, new long[] {2, 7}, 0)), null);
        assertEveryRankFailed(failures, InvalidShardingException.class, "\"w\"", "[4, 6]", "[4, 7]");
    }

    @Test
    void commonStateThatIsNotJsonIsRefused() {
        List<Throwable> failures = saveAll(2, (m, r) -> List.of(
                Blocks.shard(m, "w", SHAPE, new long[] {2L * r, 0}, new long[] {2, 6}, 0)),
                Map.of("scheduler", Map.of("started", new Date(0))));
        assertEveryRankFailed(failures, CheckpointException.class, "common.scheduler.started", "java.util.Date");
    }

    @Test
    void anInvalidSaveLeavesTheEarlierCheckpointInItsDirectoryIntact() throws Exception {
        // a complete checkpoint first; a second, invalid save into the same directory must not touch it
        assertEquals(java.util.Arrays.asList(null, null), saveAll(2, (m, r) -> List.of(
                Blocks.shard(m, "w", SHAPE, new long[] {2L * r, 0}, new long[] {2, 6}, 0)), null));
        assertTrue(DistCheckpointing.isComplete(dir));
        List<Throwable> failures = saveAll(2, (m, r) -> new ArrayList<>(List.of(
                Blocks.shard(m, "w", SHAPE, new long[] {0, 0}, new long[] {2, 6}, 0))), null);
        for (Throwable t : failures) {
            assertInstanceOf(InvalidShardingException.class, t);
        }
        assertTrue(DistCheckpointing.isComplete(dir), "validation fails before anything is deleted or written");
    }
}
