package io.mcore4j.parallel.inprocess;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.parallel.CommunicationException;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroup;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.PendingCollective;
import io.mcore4j.parallel.ReduceOp;

import java.time.Duration;
import java.util.List;
import java.util.stream.IntStream;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.junit.jupiter.api.Test;

/**
 * Every collective checked against a serial computation on plain Java arrays. Rank r contributes
 * {@code value(r, i) = (r + 1) * (i % 7 - 3) + r}, small integers exact in every dtype.
 */
class InJvmCollectivesTest {
    private static final List<DataType> DTYPES = List.of(DataType.FLOAT32, DataType.FLOAT16, DataType.INT32, DataType.INT64);
    private static final int ROWS = 8;
    private static final int COLS = 3;

    static double value(int rank, int i) {
        return (rank + 1) * (i % 7 - 3) + rank;
    }

    static NDArray contribution(NDManager m, int rank, DataType dtype) {
        double[] v = new double[ROWS * COLS];
        for (int i = 0; i < v.length; i++) {
            v[i] = value(rank, i);
        }
        return m.create(v, new Shape(ROWS, COLS)).toType(dtype, false);
    }

    @ParameterizedTest
    @ValueSource(ints = {1, 2, 3, 4, 8})
    void collectivesMatchSerial(int world) {
        InJvmWorld.run(world, Duration.ofSeconds(30), ctx -> {
            Communicator c = ctx.backend().communicator(ProcessGroup.of("world", IntStream.range(0, world).toArray(), ctx.rank()));
            NDManager m = ctx.manager();
            int n = ROWS * COLS;
            for (DataType dtype : DTYPES) {
                NDArray x = contribution(m, ctx.rank(), dtype);
                double[] sum = new double[n];
                double[] max = new double[n];
                double[] min = new double[n];
                for (int i = 0; i < n; i++) {
                    max[i] = Double.NEGATIVE_INFINITY;
                    min[i] = Double.POSITIVE_INFINITY;
                    for (int r = 0; r < world; r++) {
                        sum[i] += value(r, i);
                        max[i] = Math.max(max[i], value(r, i));
                        min[i] = Math.min(min[i], value(r, i));
                    }
                }
                assertArrayEquals(sum, doubles(c.allReduce(x, ReduceOp.SUM, m)), 0, dtype + " sum");
                assertArrayEquals(max, doubles(c.allReduce(x, ReduceOp.MAX, m)), 0, dtype + " max");
                assertArrayEquals(min, doubles(c.allReduce(x, ReduceOp.MIN, m)), 0, dtype + " min");
                double[] avg = new double[n];
                for (int i = 0; i < n; i++) {
                    avg[i] = sum[i] / world;
                    if (!(dtype == DataType.FLOAT32 || dtype == DataType.FLOAT16)) {
                        avg[i] = (long) avg[i];
                    }
                }
                assertArrayEquals(avg, doubles(c.allReduce(x, ReduceOp.AVG, m)), dtype == DataType.FLOAT16 ? 1e-2 : 1e-6, dtype + " avg");

                NDArray inPlace = x.duplicate();
                c.allReduceInPlace(inPlace, ReduceOp.SUM);
                assertArrayEquals(sum, doubles(inPlace), 0, dtype + " in-place sum");

                // all-gather along dim 0 and dim 1
                NDArray g0 = c.allGather(x, 0, m);
                assertEquals(new Shape(ROWS * world, COLS), g0.getShape());
                NDArray g1 = c.allGather(x, 1, m);
                assertEquals(new Shape(ROWS, COLS * world), g1.getShape());
                // the started form gives the blocking one's result
                PendingCollective started = c.startAllGather(x, m);
                assertArrayEquals(doubles(g0), doubles(started.await()), 0, dtype + " started all-gather");
                double[] g0v = doubles(g0);
                double[] g1v = doubles(g1);
                for (int r = 0; r < world; r++) {
                    for (int row = 0; row < ROWS; row++) {
                        for (int col = 0; col < COLS; col++) {
                            int i = row * COLS + col;
                            assertEquals(value(r, i), g0v[(r * ROWS + row) * COLS + col], 0);
                            assertEquals(value(r, i), g1v[row * COLS * world + r * COLS + col], 0);
                        }
                    }
                }

                // reduce-scatter along dim 0 (world divides 8 for world 1, 2, 4, 8) or along a dim of size world
                NDArray wide = m.zeros(new Shape(2, world * 2), dtype).add(ctx.rank() + 1);
                NDArray rs = c.reduceScatter(wide, 1, ReduceOp.SUM, m);
                assertEquals(new Shape(2, 2), rs.getShape());
                double expected = world * (world + 1) / 2.0;
                for (double v : doubles(rs)) {
                    assertEquals(expected, v, 0);
                }

                // broadcast from the last rank
                NDArray b = c.broadcast(x, world - 1, m);
                double[] bv = doubles(b);
                for (int i = 0; i < n; i++) {
                    assertEquals(value(world - 1, i), bv[i], 0);
                }
            }
            return null;
        });
    }

    @ParameterizedTest
    @ValueSource(ints = {1, 2, 3, 4, 8})
    void unevenAllToAllAndPointToPoint(int world) {
        InJvmWorld.run(world, Duration.ofSeconds(30), ctx -> {
            Communicator c = ctx.backend().communicator(ProcessGroup.of("world", IntStream.range(0, world).toArray(), ctx.rank()));
            NDManager m = ctx.manager();
            int me = ctx.rank();
            // rank s sends (s + j) % 3 rows to rank j, each row holding 100 * s + j
            long[] send = new long[world];
            long[] recv = new long[world];
            for (int j = 0; j < world; j++) {
                send[j] = (me + j) % 3;
                recv[j] = (j + me) % 3;
            }
            long rows = java.util.Arrays.stream(send).sum();
            float[] data = new float[(int) rows * 2];
            int k = 0;
            for (int j = 0; j < world; j++) {
                for (int row = 0; row < send[j]; row++) {
                    data[k++] = 100 * me + j;
                    data[k++] = -(100 * me + j);
                }
            }
            NDArray out = c.allToAll(m.create(data, new Shape(rows, 2)), send, recv, m);
            float[] got = out.toFloatArray();
            k = 0;
            for (int s = 0; s < world; s++) {
                for (int row = 0; row < recv[s]; row++) {
                    assertEquals(100 * s + me, got[k++], 0);
                    assertEquals(-(100 * s + me), got[k++], 0);
                }
            }
            // ring send/recv in int64, twice, to check ordering
            int next = (me + 1) % world;
            int prev = (me + world - 1) % world;
            c.send(m.create(new long[] {me, 1}), next);
            c.send(m.create(new long[] {me, 2}), next);
            assertArrayEquals(new long[] {prev, 1}, c.recv(new Shape(2), DataType.INT64, prev, m).toLongArray());
            assertArrayEquals(new long[] {prev, 2}, c.recv(new Shape(2), DataType.INT64, prev, m).toLongArray());
            List<byte[]> bytes = c.allGatherBytes(new byte[] {(byte) me});
            for (int r = 0; r < world; r++) {
                assertEquals(r, bytes.get(r)[0]);
            }
            c.barrier();
            return null;
        });
    }

    @Test
    void groupsFromProcessGroupsCommunicateIndependently() {
        // TP4 inside PP2 on 8 ranks: all-reduce of x = rank over TP gives 6 on stage 0 and 22 on stage 1
        List<Double> sums = InJvmWorld.run(8, ctx -> {
            ProcessGroups groups = ctx.groups(ParallelDims.of(8, 4, 2));
            NDArray x = ctx.manager().create(new float[] {ctx.rank()});
            return (double) groups.tp().allReduce(x, ReduceOp.SUM, ctx.manager()).getFloat();
        });
        assertEquals(List.of(6.0, 6.0, 6.0, 6.0, 22.0, 22.0, 22.0, 22.0), sums);
    }

    @Test
    void hierarchicalContextParallelGroupsAreBuiltWithTheOthers() {
        // TP2 CP4 as 2 x 2: world rank = tp + 2 cp; an all-reduce of x = rank over each level
        List<List<Double>> sums = InJvmWorld.run(8, ctx -> {
            ProcessGroups groups = ctx.groups(ParallelDims.builder(8).tensorParallel(2).contextParallel(4)
                    .hierarchicalContextParallelSizes(2, 2).build());
            NDArray x = ctx.manager().create(new float[] {ctx.rank()});
            List<Double> out = new java.util.ArrayList<>();
            for (Communicator c : groups.hierarchicalCp()) {
                out.add((double) c.allReduce(x, ReduceOp.SUM, ctx.manager()).getFloat());
            }
            return out;
        });
        // level 0 {0, 2}, {4, 6}, {1, 3}, {5, 7}; level 1 {0, 4}, {2, 6}, {1, 5}, {3, 7}
        double[][] expected = {{2, 4}, {4, 6}, {2, 8}, {4, 10}, {10, 4}, {12, 6}, {10, 8}, {12, 10}};
        for (int r = 0; r < 8; r++) {
            assertEquals(List.of(expected[r][0], expected[r][1]), sums.get(r), "rank " + r);
        }
        assertEquals(List.of(), InJvmWorld.run(2, ctx -> ctx.groups(ParallelDims.builder(2).contextParallel(2).build())
                .hierarchicalCp()).get(0));
    }

    @Test
    void aStalledRankMakesTheOthersFailWithinTheTimeoutNamingIt() {
        long start = System.nanoTime();
        InJvmWorld.RankFailedException e = assertThrows(InJvmWorld.RankFailedException.class, () ->
                InJvmWorld.run(3, Duration.ofMillis(500), ctx -> {
                    Communicator c = ctx.backend().communicator(ProcessGroup.of("world", new int[] {0, 1, 2}, ctx.rank()));
                    if (ctx.rank() == 2) {
                        Thread.sleep(3000); // stalls, never joins
                        return null;
                    }
                    c.allReduce(ctx.manager().ones(new Shape(2)), ReduceOp.SUM, ctx.manager());
                    return null;
                }));
        double seconds = (System.nanoTime() - start) / 1e9;
        CommunicationException ce = assertInstanceOf(CommunicationException.class, e.getCause());
        assertEquals(List.of(2), ce.ranks());
        assertTrue(ce.getMessage().contains("world[0,1,2] all-reduce SUM"), ce.getMessage());
        assertTrue(ce.getMessage().contains("timed out after 500 ms"), ce.getMessage());
        assertTrue(seconds < 4, "took " + seconds + " s");
    }

    @Test
    void aDeadRankAbortsTheOthersQuickly() {
        long start = System.nanoTime();
        InJvmWorld.RankFailedException e = assertThrows(InJvmWorld.RankFailedException.class, () ->
                InJvmWorld.run(4, Duration.ofSeconds(30), ctx -> {
                    Communicator c = ctx.backend().communicator(ProcessGroup.of("world", new int[] {0, 1, 2, 3}, ctx.rank()));
                    if (ctx.rank() == 1) {
                        throw new IllegalStateException("rank 1 crashed");
                    }
                    c.barrier();
                    return null;
                }));
        assertEquals(1, e.rank());
        assertEquals("rank 1 crashed", e.getCause().getMessage());
        assertTrue((System.nanoTime() - start) / 1e9 < 10, "abort should not wait for the 30 s timeout");
    }

    @Test
    void mismatchedShapesAndOperationsAreReported() {
        InJvmWorld.RankFailedException e = assertThrows(InJvmWorld.RankFailedException.class, () ->
                InJvmWorld.run(2, Duration.ofSeconds(10), ctx -> {
                    Communicator c = ctx.backend().communicator(ProcessGroup.of("world", new int[] {0, 1}, ctx.rank()));
                    c.allReduce(ctx.manager().ones(new Shape(2, ctx.rank() + 1)), ReduceOp.SUM, ctx.manager());
                    return null;
                }));
        String msg = e.getCause().getMessage();
        assertTrue(msg.contains("rank 0: all-reduce SUM float32 (2, 1)") && msg.contains("rank 1: all-reduce SUM float32 (2, 2)"), msg);
    }

    private static double[] doubles(NDArray a) {
        return a.toType(DataType.FLOAT64, false).toDoubleArray();
    }
}
