package io.mcore4j.checkpoint;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDManager;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.nio.file.Path;
import java.util.List;
import java.util.function.BiFunction;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Acceptance 5 (strict modes). The checkpoint holds keys a and b; the load asks for a and c, so c is
 * missing and b unexpected.
 */
class StrictModeTest {
    static final long[] SHAPE = {3, 5};

    @TempDir
    static Path dir;

    @BeforeAll
    static void save() {
        InJvmWorld.run(1, rank -> {
            DistCheckpointing.save(dir, List.of(Blocks.shard(rank.manager(), "a", SHAPE, new long[2], SHAPE, 0),
                    Blocks.shard(rank.manager(), "b", SHAPE, new long[2], SHAPE, 0)), null,
                    rank.groups(ParallelDims.of(1, 1, 1)).world());
            return null;
        });
    }

    /** Per rank: the failure, or the result; with the targets checked afterwards by {@code check}. */
    private static List<Object> load(int world, StrictMode mode, BiFunction<NDManager, Integer, List<ShardedTensor>> targets) {
        return InJvmWorld.run(world, rank -> {
            List<ShardedTensor> t = targets.apply(rank.manager(), rank.rank());
            try {
                LoadResult r = DistCheckpointing.load(dir, t, rank.groups(ParallelDims.of(world, 1, 1)).world(), mode);
                for (ShardedTensor target : t) {
                    if (!target.key().equals("c")) {
                        Blocks.assertHoldsOriginal(target);
                    } else {
                        assertEquals(1234.5f, target.data().toFloatArray()[0], "a missing key's target is untouched");
                    }
                }
                return r;
            } catch (IncompatibleCheckpointException e) {
                return e;
            }
        });
    }

    private static List<Object> loadAandC(StrictMode mode) {
        return load(1, mode, (m, r) -> List.of(Blocks.target(m, "a", SHAPE, new long[2], SHAPE),
                Blocks.target(m, "c", SHAPE, new long[2], SHAPE)));
    }

    private static void assertRaised(Object outcome, String... words) {
        IncompatibleCheckpointException e = assertInstanceOf(IncompatibleCheckpointException.class, outcome);
        for (String w : words) {
            assertTrue(e.getMessage().contains(w), "message lacks \"" + w + "\": " + e.getMessage());
        }
    }

    @Test
    void raiseAllRaisesForBoth() {
        assertRaised(loadAandC(StrictMode.RAISE_ALL).get(0), "missing from the checkpoint: [c]", "requested by no rank: [b]");
    }

    @Test
    void raiseMissingRaisesForTheMissingKeyOnly() {
        Object outcome = loadAandC(StrictMode.RAISE_MISSING).get(0);
        assertRaised(outcome, "[c]");
        assertTrue(!((Exception) outcome).getMessage().contains("[b]"));
    }

    @Test
    void raiseUnexpectedRaisesForTheUnexpectedKeyOnly() {
        Object outcome = loadAandC(StrictMode.RAISE_UNEXPECTED).get(0);
        assertRaised(outcome, "[b]");
        assertTrue(!((Exception) outcome).getMessage().contains("[c]"));
    }

    @Test
    void logAndReturnModesLoadWhatExistsAndReportTheRest() {
        for (StrictMode mode : List.of(StrictMode.LOG_ALL, StrictMode.RETURN_ALL)) {
            LoadResult r = assertInstanceOf(LoadResult.class, loadAandC(mode).get(0), mode.toString());
            assertEquals(List.of("c"), r.missingKeys(), mode.toString());
            assertEquals(List.of("b"), r.unexpectedKeys(), mode.toString());
        }
    }

    @Test
    void raiseMissingToleratesUnexpectedKeys() {
        LoadResult r = assertInstanceOf(LoadResult.class, load(1, StrictMode.RAISE_MISSING,
                (m, rank) -> List.of(Blocks.target(m, "a", SHAPE, new long[2], SHAPE))).get(0));
        assertEquals(List.of("b"), r.unexpectedKeys());
    }

    @Test
    void keysAreCountedOverAllRanks() {
        // rank 0 asks for a, rank 1 for b: nothing is unexpected, every rank agrees and loads
        List<Object> outcomes = load(2, StrictMode.RAISE_ALL, (m, rank) -> List.of(
                Blocks.target(m, rank == 0 ? "a" : "b", SHAPE, new long[2], SHAPE)));
        for (Object o : outcomes) {
            LoadResult r = assertInstanceOf(LoadResult.class, o);
            assertEquals(List.of(), r.unexpectedKeys());
            assertNull(r.common().get("anything"));
        }
        // and a raise is raised on every rank, not only on the rank that lacks the key
        List<Object> raised = load(2, StrictMode.RAISE_MISSING, (m, rank) -> List.of(
                Blocks.target(m, rank == 0 ? "a" : "c", SHAPE, new long[2], SHAPE)));
        raised.forEach(o -> assertRaised(o, "[c]"));
    }
}
