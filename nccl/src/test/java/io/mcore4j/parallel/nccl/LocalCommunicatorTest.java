package io.mcore4j.parallel.nccl;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.Device;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.core.testing.NativeArrays;
import io.mcore4j.parallel.CommunicationException;
import io.mcore4j.parallel.ProcessGroup;
import io.mcore4j.parallel.ReduceOp;

import java.time.Duration;
import java.util.List;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * A group of one member needs no NCCL communicator: its collectives are copies. This runs the whole
 * communicator surface without CUDA (argument checks, ownership, leaks); the NCCL paths run in
 * {@code NcclCollectivesCheck} on GPUs.
 */
class LocalCommunicatorTest {
    private NDManager root;
    private NcclCommunicator c;

    @BeforeEach
    void open() {
        root = Mcore4j.newRootManager();
        c = new NcclCommunicator(ProcessGroup.of("pp", new int[] {3}, 3), null, Device.gpu(0), Duration.ofSeconds(5),
                NcclBackend.DEFAULT_CHUNK_BYTES, root.newSubManager());
    }

    @AfterEach
    void close() {
        c.close();
        root.close();
    }

    @Test
    void collectivesOfOneMemberAreCopiesOwnedByTheOwner() {
        try (NDManager owner = root.newSubManager(); NDManager inputs = root.newSubManager()) {
            for (DataType dtype : List.of(DataType.FLOAT32, DataType.FLOAT16, DataType.INT32, DataType.INT64, DataType.FLOAT64)) {
                NDArray x = inputs.arange(0f, 6f, 1f).reshape(2, 3).toType(dtype, false);
                double[] v = x.toType(DataType.FLOAT64, false).toDoubleArray();
                for (ReduceOp op : ReduceOp.values()) {
                    NDArray r = c.allReduce(x, op, owner);
                    assertNotSame(x, r);
                    assertSame(owner, r.getManager());
                    assertEquals(dtype, r.getDataType());
                    assertArrayEquals(v, r.toType(DataType.FLOAT64, false).toDoubleArray(), 0, dtype + " " + op);
                }
                assertEquals(new Shape(2, 3), c.allGather(x, 1, owner).getShape());
                assertEquals(new Shape(2, 3), c.reduceScatter(x, -1, ReduceOp.SUM, owner).getShape());
                assertArrayEquals(v, c.broadcast(x, 0, owner).toType(DataType.FLOAT64, false).toDoubleArray(), 0);
                NDArray moved = c.allToAll(x, new long[] {2}, new long[] {2}, owner);
                assertArrayEquals(v, moved.toType(DataType.FLOAT64, false).toDoubleArray(), 0);
                NDArray same = x.duplicate();
                c.allReduceInPlace(same, ReduceOp.AVG);
                assertArrayEquals(v, same.toType(DataType.FLOAT64, false).toDoubleArray(), 0);
            }
            assertArrayEquals(new byte[] {4, 2}, c.allGatherBytes(new byte[] {4, 2}).get(0));
            c.barrier();
        }
    }

    @Test
    void sendsToSelfAreQueuedCopiesInOrder() {
        try (NDManager owner = root.newSubManager()) {
            NDArray a = owner.create(new long[] {1, 2});
            c.send(a, 0);
            a.close(); // the sender may release its tensor at once
            c.send(owner.create(new long[] {3, 4}), 0);
            NDArray first = c.recv(new Shape(2), DataType.INT64, 0, owner);
            assertSame(owner, first.getManager());
            assertArrayEquals(new long[] {1, 2}, first.toLongArray());
            CommunicationException e = assertThrows(CommunicationException.class,
                    () -> c.recv(new Shape(3), DataType.INT64, 0, owner));
            assertTrue(e.getMessage().contains("sent int64 (2) but int64 (3) was expected"), e.getMessage());
            assertThrows(CommunicationException.class, () -> c.barrier(), "a failure breaks the communicator");
        }
    }

    @Test
    void argumentsAreCheckedNamingTheGroup() {
        try (NDManager owner = root.newSubManager()) {
            NDArray x = owner.zeros(new Shape(3, 2));
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> c.broadcast(x, 1, owner));
            assertTrue(e.getMessage().contains("pp[3]: broadcast root 1 is outside [0, 1)"), e.getMessage());
            e = assertThrows(IllegalArgumentException.class, () -> c.allGather(x, 2, owner));
            assertTrue(e.getMessage().contains("dim 2 is out of range"), e.getMessage());
            e = assertThrows(IllegalArgumentException.class, () -> c.allReduce(owner.zeros(new Shape(2), DataType.BOOLEAN),
                    ReduceOp.SUM, owner));
            assertTrue(e.getMessage().contains("pp[3] all-reduce SUM boolean") && e.getMessage().contains("not supported"),
                    e.getMessage());
            e = assertThrows(IllegalArgumentException.class, () -> c.allToAll(x, new long[] {2}, new long[] {2}, owner));
            assertTrue(e.getMessage().contains("sum to 2 but the input has 3 rows"), e.getMessage());
            e = assertThrows(IllegalArgumentException.class, () -> c.allToAll(x, new long[] {3, 0}, new long[] {3}, owner));
            assertTrue(e.getMessage().contains("2 send and 1 receive splits for a group of 1"), e.getMessage());
            CommunicationException ce = assertThrows(CommunicationException.class,
                    () -> c.allToAll(x, new long[] {3}, new long[] {2}, owner));
            assertTrue(ce.getMessage().contains("sends 3 rows to itself but expects 2"), ce.getMessage());
        }
    }

    @Test
    void repeatedStepsLeaveNoNativeArraysBehind() {
        try (NDManager params = root.newSubManager()) {
            NDArray w = params.ones(new Shape(4, 6));
            int before = NativeArrays.live(root);
            for (int step = 0; step < 5; step++) {
                try (NDManager scope = root.newSubManager()) {
                    c.allReduce(w, ReduceOp.SUM, scope);
                    c.allGather(w, 1, scope);
                    c.reduceScatter(w, 0, ReduceOp.AVG, scope);
                    c.broadcast(w, 0, scope);
                    c.allToAll(w, new long[] {4}, new long[] {4}, scope);
                    c.send(w, 0);
                    c.recv(new Shape(4, 6), DataType.FLOAT32, 0, scope);
                    c.allReduceInPlace(w, ReduceOp.MAX);
                    c.allGatherBytes(new byte[] {1});
                    c.barrier();
                }
                assertEquals(before, NativeArrays.live(root), "live arrays after step " + step);
            }
        }
    }

    @Test
    void aClosedCommunicatorRefusesCalls() {
        c.close();
        IllegalStateException e = assertThrows(IllegalStateException.class, () -> c.barrier());
        assertTrue(e.getMessage().contains("closed"), e.getMessage());
    }

    @Test
    void aGroupOfSeveralNeedsAnNcclCommunicator() {
        assertThrows(IllegalArgumentException.class, () -> new NcclCommunicator(ProcessGroup.of("tp", new int[] {0, 1}, 0), null,
                Device.gpu(0), Duration.ofSeconds(1), 1, root.newSubManager()));
    }
}
