package io.mcore4j.parallel;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;

import java.time.Duration;
import java.util.stream.IntStream;

import io.mcore4j.parallel.inprocess.InJvmWorld;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * {@link ChunkLayout}: validation, gathering into travel order and placing back; and {@link Communicator#allToAllChunks}
 * and {@link Communicator#startAllToAllChunks} (the defaults, around {@code allToAll}) against the rows each rank must receive where it wants them, in the shape of
 * the expert dispatch: rank s sends rank j {@code (s + 2j + l) % 3} rows for each of its L local experts l (some
 * none), laid out expert by expert, and each rank places what it receives by local expert, then by source.
 */
class ChunkLayoutTest {

    @Test
    void layoutsMustTileTheirRows() {
        ChunkLayout ok = new ChunkLayout(new long[][] {{2, 0}, {1}}, new long[][] {{1, 9}, {0}}, 3);
        assertArrayEquals(new long[] {2, 1}, ok.rowsPerPeer());
        assertFalse(ok.isConsecutive());
        assertTrue(ChunkLayout.consecutive(new long[][] {{2, 0}, {1}}).isConsecutive());
        assertEquals("chunk layout: peer 1 chunk 0 starts at row 1 where row 2 was expected: the chunks must tile rows"
                + " [0, 3)", assertThrows(IllegalArgumentException.class,
                () -> new ChunkLayout(new long[][] {{2}, {1}}, new long[][] {{0}, {1}}, 3)).getMessage());
        assertEquals("chunk layout: the chunks cover rows [0, 3) of 4", assertThrows(IllegalArgumentException.class,
                () -> new ChunkLayout(new long[][] {{2}, {1}}, new long[][] {{0}, {2}}, 4)).getMessage());
        assertEquals("chunk layout: peer 0 chunk 0 has size -1 at offset 0 (both must be >= 0)",
                assertThrows(IllegalArgumentException.class,
                        () -> new ChunkLayout(new long[][] {{-1}}, new long[][] {{0}}, 0)).getMessage());
        assertEquals("chunk layout: peer 0 has 2 chunk sizes and 1 offsets", assertThrows(IllegalArgumentException.class,
                () -> new ChunkLayout(new long[][] {{1, 1}}, new long[][] {{0}}, 2)).getMessage());
    }

    @Test
    void gatherAndPlaceAreInverse() {
        try (NDManager m = NDManager.newBaseManager()) {
            // rows 0..5 hold 0..5; peer 0's chunks lie at rows 3 and 0, peer 1's at row 5 and rows 1..2 (and an empty one)
            ChunkLayout layout = new ChunkLayout(new long[][] {{2, 1}, {1, 0, 2}}, new long[][] {{3, 0}, {5, 4, 1}}, 6);
            NDArray rows = m.arange(0f, 6f).reshape(6, 1);
            NDArray travelled = layout.gather(rows, m);
            assertArrayEquals(new float[] {3, 4, 0, 5, 1, 2}, travelled.toFloatArray());
            assertArrayEquals(rows.toFloatArray(), layout.place(travelled, m).toFloatArray());
            ChunkLayout consecutive = ChunkLayout.consecutive(new long[][] {{2}, {4}});
            assertSame(rows, consecutive.gather(rows, m));
            assertSame(rows, consecutive.place(rows, m));
        }
    }

    /** Rows rank s sends rank j for local expert l. */
    static long rowsFor(int s, int j, int l) {
        return (s + 2L * j + l) % 3;
    }

    /** The value of row r of those rows. */
    static float value(int s, int j, int l, long r) {
        return 1000 * s + 100 * j + 10 * l + r;
    }

    @ParameterizedTest
    @ValueSource(ints = {1, 2, 3, 4})
    void chunksLandWhereTheReceiverPlacesThem(int world) {
        int experts = 3;
        InJvmWorld.run(world, Duration.ofSeconds(30), ctx -> {
            Communicator c = ctx.backend().communicator(ProcessGroup.of("world", IntStream.range(0, world).toArray(),
                    ctx.rank()));
            NDManager m = ctx.manager();
            int me = ctx.rank();
            ChunkLayout send = expertMajor(world, experts, (j, l) -> rowsFor(me, j, l));
            ChunkLayout recv = expertMajor(world, experts, (i, l) -> rowsFor(i, me, l));
            float[] data = new float[(int) send.rows()];
            float[] expected = new float[(int) recv.rows()];
            for (int j = 0; j < world; j++) {
                for (int l = 0; l < experts; l++) {
                    for (long r = 0; r < rowsFor(me, j, l); r++) {
                        data[(int) (send.offsets()[j][l] + r)] = value(me, j, l, r);
                    }
                    for (long r = 0; r < rowsFor(j, me, l); r++) {
                        expected[(int) (recv.offsets()[j][l] + r)] = value(j, me, l, r);
                    }
                }
            }
            NDArray out = c.allToAllChunks(m.create(data, new Shape(data.length, 1)), send, recv, m);
            assertArrayEquals(expected, out.toFloatArray(), 0f, "rank " + me);
            // and back: the transpose returns every row where it started
            assertArrayEquals(data, c.allToAllChunks(out, recv, send, m).toFloatArray(), 0f, "rank " + me);
            // started into a tensor given (the default runs it at once): the same rows, in that tensor
            NDArray target = m.zeros(new Shape(recv.rows(), 1));
            assertSame(target, c.startAllToAllChunks(m.create(data, new Shape(data.length, 1)), send, recv, target).await());
            assertArrayEquals(expected, target.toFloatArray(), 0f, "rank " + me + ", started");
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> c.startAllToAllChunks(
                    m.create(data, new Shape(data.length, 1)), send, recv, m.zeros(new Shape(recv.rows() + 1, 1))));
            assertEquals(c.group().key() + " all-to-all of chunks into a tensor: the output is float32 (" + (recv.rows() + 1)
                    + ", 1); the received rows are float32 (" + recv.rows() + ", 1), contiguous", e.getMessage());
            return null;
        });
    }

    /** Chunks per (peer, expert) of the given sizes, laid out expert by expert, each expert's by peer. */
    static ChunkLayout expertMajor(int peers, int experts, java.util.function.BiFunction<Integer, Integer, Long> size) {
        long[][] sizes = new long[peers][experts];
        long[][] offsets = new long[peers][experts];
        long at = 0;
        for (int l = 0; l < experts; l++) {
            for (int j = 0; j < peers; j++) {
                sizes[j][l] = size.apply(j, l);
                offsets[j][l] = at;
                at += sizes[j][l];
            }
        }
        return new ChunkLayout(sizes, offsets, at);
    }
}
