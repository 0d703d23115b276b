package io.mcore4j.parallel.tcp;

import io.mcore4j.parallel.rendezvous.JobToken;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.testing.NativeArrays;
import io.mcore4j.parallel.CommunicationException;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroup;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.ReduceOp;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.time.Duration;
import java.util.List;
import java.util.stream.IntStream;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The TCP backend with ranks as threads of this JVM (each with its own sockets, store client and
 * mesh): results against the in-JVM backend, error reporting, failure handling and native memory.
 * The multi-process tests cover real processes.
 */
class TcpBackendThreadsTest {

    private static Communicator world(TcpBackend backend) {
        return backend.communicator(ProcessGroup.of("world", IntStream.range(0, backend.worldSize()).toArray(), backend.worldRank()));
    }

    @ParameterizedTest
    @ValueSource(ints = {1, 3})
    void collectivesMatchTheInJvmBackendBitForBit(int worldSize) {
        List<List<String>> tcp = TcpThreads.values(TcpThreads.run(worldSize, Duration.ofSeconds(30),
                (rank, backend, m) -> CollectiveScript.run(world(backend), m)));
        List<List<String>> inJvm = InJvmWorld.run(worldSize, Duration.ofSeconds(30), ctx -> CollectiveScript.run(
                ctx.backend().communicator(ProcessGroup.of("world", IntStream.range(0, worldSize).toArray(), ctx.rank())),
                ctx.manager()));
        assertEquals(inJvm, tcp);
        assertTrue(tcp.get(0).size() > 60, "lines: " + tcp.get(0).size());
    }

    @Test
    void processGroupsOverTcpMatchTheInJvmBackend() {
        ParallelDims dims = ParallelDims.of(4, 2, 2);
        List<String> tcp = TcpThreads.values(TcpThreads.run(4, Duration.ofSeconds(30), (rank, backend, m) ->
                CollectiveScript.groupSums(ProcessGroups.create(dims, backend), rank, m)));
        List<String> inJvm = InJvmWorld.run(4, ctx -> CollectiveScript.groupSums(ctx.groups(dims), ctx.rank(), ctx.manager()));
        assertEquals(inJvm, tcp);
        // TP pairs {0,1},{2,3}; PP pairs {0,2},{1,3}
        assertEquals("groups tp=1.0 pp=2.0 dp=0.0 world=3.0", tcp.get(0));
    }

    @Test
    void twoCommunicatorsOfOneGroupKeepSeparateStreams() {
        List<float[]> got = TcpThreads.values(TcpThreads.run(2, Duration.ofSeconds(10), (rank, backend, m) -> {
            Communicator a = world(backend);
            Communicator b = world(backend);
            // rank 0 sends on b before a; rank 1 receives on a first: streams must not mix
            if (rank == 0) {
                b.send(m.create(new float[] {2}), 1);
                a.send(m.create(new float[] {1}), 1);
                return new float[0];
            }
            float first = a.recv(new Shape(1), DataType.FLOAT32, 0, m).getFloat();
            float second = b.recv(new Shape(1), DataType.FLOAT32, 0, m).getFloat();
            return new float[] {first, second};
        }));
        assertEquals(1f, got.get(1)[0]);
        assertEquals(2f, got.get(1)[1]);
    }

    @Test
    void mismatchedShapesAreReportedWithWhatEachRankPassed() {
        List<TcpThreads.Outcome<Object>> out = TcpThreads.run(2, Duration.ofSeconds(10), (rank, backend, m) ->
                world(backend).allReduce(m.ones(new Shape(2, rank + 1)), ReduceOp.SUM, m));
        for (TcpThreads.Outcome<Object> o : out) {
            CommunicationException e = assertInstanceOf(CommunicationException.class, o.error());
            assertTrue(e.getMessage().contains("rank 0: all-reduce SUM float32 (2, 1)")
                    && e.getMessage().contains("rank 1: all-reduce SUM float32 (2, 2)"), e.getMessage());
            assertEquals("world[0,1]", e.group());
        }
    }

    @Test
    void mismatchedOperationsAndReceiveTypesAreReported() {
        List<TcpThreads.Outcome<Object>> out = TcpThreads.run(2, Duration.ofSeconds(10), (rank, backend, m) -> {
            Communicator c = world(backend);
            Communicator fresh = world(backend);
            Communicator third = world(backend);
            if (rank == 0) {
                c.send(m.create(new int[] {1, 2}), 1);
            } else {
                CommunicationException e = assertThrows(CommunicationException.class,
                        () -> c.recv(new Shape(2), DataType.INT64, 0, m));
                assertTrue(e.getMessage().contains("rank 0 sent int32 (2) but int64 (2) was expected"), e.getMessage());
                CommunicationException broken = assertThrows(CommunicationException.class, c::barrier);
                assertTrue(broken.getMessage().contains("broken by an earlier failure"), broken.getMessage());
            }
            // a failure breaks one communicator only
            fresh.allGatherBytes(new byte[] {(byte) rank});
            CommunicationException e = assertThrows(CommunicationException.class, () -> {
                if (rank == 0) {
                    third.barrier();
                } else {
                    third.allGatherBytes(new byte[0]);
                }
            });
            assertTrue(e.getMessage().contains("members called different operations: rank 0: barrier (call 1); "
                    + "rank 1: all-gather bytes (call 1);"), e.getMessage());
            return null;
        });
        TcpThreads.values(out);
    }

    @Test
    void aStalledRankMakesTheOthersFailAtTheTimeoutNamingIt() {
        List<TcpThreads.Outcome<Object>> out = TcpThreads.run(3, Duration.ofMillis(500), (rank, backend, m) -> {
            if (rank == 2) {
                Thread.sleep(2500);
                return null;
            }
            return world(backend).allReduce(m.ones(new Shape(2)), ReduceOp.SUM, m);
        });
        for (int r = 0; r < 2; r++) {
            CommunicationException e = assertInstanceOf(CommunicationException.class, out.get(r).error());
            assertEquals(List.of(2), e.ranks());
            assertTrue(e.getMessage().contains("world[0,1,2] all-reduce SUM float32 (2)"), e.getMessage());
            assertTrue(e.getMessage().contains("timed out after 500 ms waiting for rank(s) [2]"), e.getMessage());
            assertTrue(out.get(r).seconds() >= 0.45 && out.get(r).seconds() < 2.4, "took " + out.get(r).seconds() + " s");
        }
    }

    @Test
    void aRankThatLeavesMakesTheOthersFailAtOnceAndBreaksTheCommunicator() {
        List<TcpThreads.Outcome<Object>> out = TcpThreads.run(3, Duration.ofSeconds(30), (rank, backend, m) -> {
            Communicator c = world(backend);
            if (rank == 1) {
                backend.close();
                return null;
            }
            CommunicationException first = assertThrows(CommunicationException.class, c::barrier);
            CommunicationException later = assertThrows(CommunicationException.class,
                    () -> c.allReduce(m.ones(new Shape(1)), ReduceOp.SUM, m));
            assertTrue(later.getMessage().contains("broken by an earlier failure"), later.getMessage());
            throw first;
        });
        assertNull(out.get(1).error());
        for (int r : new int[] {0, 2}) {
            CommunicationException e = assertInstanceOf(CommunicationException.class, out.get(r).error());
            assertEquals(List.of(1), e.ranks(), "rank " + r + ": " + e.getMessage());
            assertTrue(e.getMessage().contains("world[0,1,2] barrier") && e.getMessage().contains("rank 1 closed its backend"),
                    e.getMessage());
            assertTrue(out.get(r).seconds() < 10, "should fail long before the 30 s timeout, took " + out.get(r).seconds());
        }
    }

    @Test
    void aRankWithTheWrongTokenIsRejectedAndTheOthersNameIt() {
        JobToken good = JobToken.of("good");
        long start = System.nanoTime();
        List<TcpThreads.Outcome<Object>> out = TcpThreads.run(2, Duration.ofSeconds(5), Duration.ofMillis(1500),
                r -> r == 1 ? JobToken.of("stale job") : good, (rank, backend, m) -> null);
        assertTrue((System.nanoTime() - start) / 1e9 < 10);
        CommunicationException intruder = assertInstanceOf(CommunicationException.class, out.get(1).error());
        assertTrue(intruder.getMessage().contains("job token mismatch"), intruder.getMessage());
        CommunicationException host = assertInstanceOf(CommunicationException.class, out.get(0).error());
        assertEquals(List.of(1), host.ranks());
        assertEquals("connect", host.operation());
    }

    @Test
    void repeatedStepsDoNotLeakNativeArrays() {
        TcpThreads.values(TcpThreads.run(2, Duration.ofSeconds(30), (rank, backend, root) -> {
            Communicator c = world(backend);
            NDArray persistent = root.ones(new Shape(4, 2));
            int[] counts = new int[6];
            for (int step = 0; step < counts.length; step++) {
                try (NDManager m = root.newSubManager()) {
                    NDArray x = m.arange(0f, 8f).reshape(4, 2);
                    NDArray xi = x.toType(DataType.INT32, false);
                    // each call adds exactly its result to the owner: no intermediates left behind
                    int live = NativeArrays.live(m);
                    c.allReduce(x, ReduceOp.AVG, m);
                    c.allReduce(xi, ReduceOp.AVG, m);
                    c.allReduce(x, ReduceOp.MAX, m);
                    c.allGather(x, 1, m);
                    c.reduceScatter(x, 0, ReduceOp.SUM, m);
                    c.reduceScatter(xi, 1, ReduceOp.AVG, m);
                    c.broadcast(x, 1, m);
                    c.allToAll(x, new long[] {1, 3}, rank == 0 ? new long[] {1, 1} : new long[] {3, 3}, m);
                    c.send(x, 1 - rank);
                    c.recv(new Shape(4, 2), DataType.FLOAT32, 1 - rank, m);
                    assertEquals(live + 9, NativeArrays.live(m), "results of 9 calls");
                    c.allReduceInPlace(persistent, ReduceOp.SUM);
                }
                counts[step] = NativeArrays.live(root);
            }
            for (int step = 1; step < counts.length; step++) {
                assertEquals(counts[0], counts[step], "live arrays per step: " + java.util.Arrays.toString(counts));
            }
            assertEquals((float) Math.pow(2, counts.length), persistent.getFloat(0, 0));
            return null;
        }));
    }
}
