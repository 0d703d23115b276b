package io.mcore4j.parallel.nccl;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import ai.djl.ndarray.types.DataType;
import io.mcore4j.parallel.ChunkLayout;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;

import org.junit.jupiter.api.Test;

/**
 * {@link PeerCopies}' protocol on the CPU: every member's queued work (copies and flag operations) runs in a
 * simulation of the devices, each member's queue in order, a wait blocking its queue until the flag is set, the
 * members interleaved in a seeded random order; the results must equal the exchange's definition, every flag must be
 * back where it started, and no queue may be left blocked.
 */
class PeerCopiesTest {
    private static final long REGION = 1 << 20; // each member's buffer, source and result live in regions this far apart

    /** One address space for all members: member m's buffer at region 3m, its source at 3m + 1, its result at 3m + 2. */
    private static final class Memory {
        final ByteBuffer bytes;

        Memory(int members) {
            bytes = ByteBuffer.allocate((int) (3 * members * REGION)).order(ByteOrder.LITTLE_ENDIAN);
        }

        static long buffer(int m) {
            return 3 * m * REGION;
        }

        static long source(int m) {
            return (3L * m + 1) * REGION;
        }

        static long result(int m) {
            return (3L * m + 2) * REGION;
        }
    }

    /** The work one member queued, replayed against the shared memory. */
    private static final class RecordedQueue implements PeerCopies.Queue {
        // {kind, ...}: 0 copy(dst, src, n), 1 wait(flag), 2 write(flag, v), 3 sum(out, in, slots, slotBytes, bytes)
        final List<long[]> ops = new ArrayList<>();
        int next;

        @Override
        public void copy(long dst, long src, long bytes) {
            assertTrue(bytes > 0, "no empty copies are queued");
            ops.add(new long[] {0, dst, src, bytes});
        }

        @Override
        public void waitAndClear(long flag) {
            ops.add(new long[] {1, flag, 0, 0});
        }

        @Override
        public void write(long flag, int value) {
            ops.add(new long[] {2, flag, value, 0});
        }

        @Override
        public void sum(long out, long in, int slots, long slotBytes, long bytes, DataType dtype) {
            assertEquals(DataType.FLOAT32, dtype, "the simulation sums float32");
            ops.add(new long[] {3, out, in, slots, slotBytes, bytes});
        }

        /** Runs this queue's next op; false when it must wait (or is done). */
        boolean step(Memory mem) {
            if (next == ops.size()) {
                return false;
            }
            long[] op = ops.get(next);
            switch ((int) op[0]) {
                case 0 -> {
                    byte[] tmp = new byte[(int) op[3]];
                    mem.bytes.get((int) op[2], tmp);
                    mem.bytes.put((int) op[1], tmp);
                }
                case 1 -> {
                    if (mem.bytes.getInt((int) op[1]) != 1) {
                        return false;
                    }
                    mem.bytes.putInt((int) op[1], 0);
                }
                case 2 -> mem.bytes.putInt((int) op[1], (int) op[2]);
                default -> {
                    // in slot order, every slot's element read before the result is written (out may be a slot)
                    for (long at = 0; at < op[5]; at += 4) {
                        float acc = 0;
                        for (int k = 0; k < op[3]; k++) {
                            acc += mem.bytes.getFloat((int) (op[2] + k * op[4] + at));
                        }
                        mem.bytes.putFloat((int) (op[1] + at), acc);
                    }
                }
            }
            next++;
            return true;
        }
    }

    /** Member m's flags as PeerCopies.open leaves them: ready 0, free 1. */
    private static void initialFlags(Memory mem, int members) {
        for (int m = 0; m < members; m++) {
            for (int j = 0; j < members; j++) {
                mem.bytes.putInt((int) (Memory.buffer(m) + 4L * j), 0);
                mem.bytes.putInt((int) (Memory.buffer(m) + 4L * (members + j)), 1);
            }
        }
    }

    private static void assertFlagsAsInitially(Memory mem, int members) {
        for (int m = 0; m < members; m++) {
            for (int j = 0; j < members; j++) {
                assertEquals(0, mem.bytes.getInt((int) (Memory.buffer(m) + 4L * j)), "member " + m + " ready[" + j + "]");
                assertEquals(1, mem.bytes.getInt((int) (Memory.buffer(m) + 4L * (members + j))), "member " + m + " free[" + j + "]");
            }
        }
    }

    /** Runs every member's queues (several exchanges each, in order) interleaved at random until all are done. */
    private static void run(Memory mem, List<List<RecordedQueue>> perMember, long seed) {
        Random random = new Random(seed);
        int[] at = new int[perMember.size()];
        while (true) {
            List<Integer> runnable = new ArrayList<>();
            boolean left = false;
            for (int m = 0; m < perMember.size(); m++) {
                while (at[m] < perMember.get(m).size() && perMember.get(m).get(at[m]).next == perMember.get(m).get(at[m]).ops.size()) {
                    at[m]++;
                }
                if (at[m] < perMember.get(m).size()) {
                    left = true;
                    RecordedQueue q = perMember.get(m).get(at[m]);
                    long[] op = q.ops.get(q.next);
                    if (op[0] != 1 || mem.bytes.getInt((int) op[1]) == 1) {
                        runnable.add(m);
                    }
                }
            }
            if (!left) {
                return;
            }
            if (runnable.isEmpty()) {
                fail("every member waits: the exchange deadlocks");
            }
            int m = runnable.get(random.nextInt(runnable.size()));
            assertTrue(perMember.get(m).get(at[m]).step(mem));
        }
    }

    private static PeerCopies member(int m, int members, long slot) {
        long[] peers = new long[members];
        for (int j = 0; j < members; j++) {
            peers[j] = Memory.buffer(j);
        }
        return new PeerCopies(m, members, slot, Memory.buffer(m), peers);
    }

    /** Member m's float32 element i in the sums' tests: small integers, so every sum is exact. */
    private static float contribution(int m, int i) {
        return (m + 1) * (i % 7 - 3) + m;
    }

    private static float sumOfContributions(int members, int i) {
        float sum = 0;
        for (int r = 0; r < members; r++) {
            sum += contribution(r, i);
        }
        return sum;
    }

    /** Member m's source: {@code elements} of its contributions. */
    private static void putContribution(Memory mem, int m, int elements) {
        for (int i = 0; i < elements; i++) {
            mem.bytes.putFloat((int) (Memory.source(m) + 4L * i), contribution(m, i));
        }
    }

    private static byte value(int from, int to, long k) {
        return (byte) (31 * from + 7 * to + k);
    }

    @Test
    void allToAllOfUnevenMessagesInRoundsOfASlot() {
        for (int members : new int[] {2, 3, 4}) {
            for (long slot : new long[] {16, 48, 4096}) {
                for (long seed = 0; seed < 4; seed++) {
                    Memory mem = new Memory(members);
                    initialFlags(mem, members);
                    // member s sends member j (s + 2 j) % 5 rows of 24 bytes, twice in a row (the second exchange
                    // reuses the slots the first left)
                    long rowBytes = 24;
                    List<List<RecordedQueue>> queues = new ArrayList<>();
                    long[][] send = new long[members][members];
                    for (int s = 0; s < members; s++) {
                        for (int j = 0; j < members; j++) {
                            send[s][j] = (s + 2L * j) % 5;
                        }
                    }
                    for (int s = 0; s < members; s++) {
                        long[][] sendRows = new long[members][];
                        long[][] recvRows = new long[members][];
                        long at = 0;
                        for (int j = 0; j < members; j++) {
                            sendRows[j] = new long[] {send[s][j]};
                            recvRows[j] = new long[] {send[j][s]};
                            for (long k = 0; k < send[s][j] * rowBytes; k++) {
                                mem.bytes.put((int) (Memory.source(s) + at + k), value(s, j, k));
                            }
                            at += send[s][j] * rowBytes;
                        }
                        PeerCopies p = member(s, members, slot);
                        List<RecordedQueue> mine = new ArrayList<>();
                        for (int round = 0; round < 2; round++) {
                            RecordedQueue q = new RecordedQueue();
                            p.exchange(Memory.source(s), PeerCopies.Pieces.of(ChunkLayout.consecutive(sendRows), rowBytes),
                                    Memory.result(s), PeerCopies.Pieces.of(ChunkLayout.consecutive(recvRows), rowBytes), q);
                            mine.add(q);
                        }
                        queues.add(mine);
                    }
                    run(mem, queues, seed);
                    for (int r = 0; r < members; r++) {
                        long at = 0;
                        for (int s = 0; s < members; s++) {
                            for (long k = 0; k < send[s][r] * rowBytes; k++) {
                                assertEquals(value(s, r, k), mem.bytes.get((int) (Memory.result(r) + at + k)),
                                        members + " members, slot " + slot + ": member " + r + "'s byte " + k + " from " + s);
                            }
                            at += send[s][r] * rowBytes;
                        }
                    }
                    assertFlagsAsInitially(mem, members);
                }
            }
        }
    }

    @Test
    void allGatherSendsTheSameBytesToEveryMemberInRankOrder() {
        int members = 3;
        long bytes = 100;
        Memory mem = new Memory(members);
        initialFlags(mem, members);
        List<List<RecordedQueue>> queues = new ArrayList<>();
        for (int s = 0; s < members; s++) {
            for (long k = 0; k < bytes; k++) {
                mem.bytes.put((int) (Memory.source(s) + k), value(s, 0, k));
            }
            RecordedQueue q = new RecordedQueue();
            member(s, members, 32).exchange(Memory.source(s), PeerCopies.Pieces.same(members, bytes), Memory.result(s),
                    PeerCopies.Pieces.rankMajor(members, bytes), q);
            queues.add(List.of(q));
        }
        run(mem, queues, 7);
        for (int r = 0; r < members; r++) {
            byte[] got = new byte[(int) (members * bytes)];
            mem.bytes.get((int) Memory.result(r), got);
            byte[] expected = new byte[got.length];
            for (int s = 0; s < members; s++) {
                for (long k = 0; k < bytes; k++) {
                    expected[(int) (s * bytes + k)] = value(s, 0, k);
                }
            }
            assertArrayEquals(expected, got, "member " + r);
        }
        assertFlagsAsInitially(mem, members);
    }

    @Test
    void allReduceSumsEveryMembersTensorInPlaceAndIntoAnother() {
        for (int members : new int[] {2, 3, 4}) {
            for (long slot : new long[] {32, 4096}) {
                for (boolean inPlace : new boolean[] {true, false}) {
                    int elements = 24 * members; // parts of 24 float32 = 96 bytes, several rounds of a 32-byte slot
                    Memory mem = new Memory(members);
                    initialFlags(mem, members);
                    List<List<RecordedQueue>> queues = new ArrayList<>();
                    for (int m = 0; m < members; m++) {
                        putContribution(mem, m, elements);
                        PeerCopies p = member(m, members, slot);
                        assertTrue(p.reduces(elements, DataType.FLOAT32));
                        long src = Memory.source(m);
                        long dst = inPlace ? src : Memory.result(m);
                        List<RecordedQueue> mine = new ArrayList<>();
                        for (int round = 0; round < 2; round++) { // the second sums the first's result
                            RecordedQueue q = new RecordedQueue();
                            p.allReduce(round == 0 ? src : dst, dst, 4L * elements, DataType.FLOAT32, q);
                            mine.add(q);
                        }
                        queues.add(mine);
                    }
                    run(mem, queues, members * 31 + slot);
                    for (int m = 0; m < members; m++) {
                        long dst = inPlace ? Memory.source(m) : Memory.result(m);
                        for (int i = 0; i < elements; i++) {
                            assertEquals(members * sumOfContributions(members, i), mem.bytes.getFloat((int) (dst + 4L * i)),
                                    members + " members, slot "
                                    + slot + (inPlace ? ", in place" : "") + ": member " + m + "'s element " + i);
                        }
                    }
                    assertFlagsAsInitially(mem, members);
                }
            }
        }
        PeerCopies three = member(0, 3, 32);
        assertTrue(!three.reduces(24 * 3 + 1, DataType.FLOAT32), "parts must be equal");
        assertTrue(!three.reduces(3 * 4, DataType.BFLOAT16), "parts must be 16-byte multiples");
        assertTrue(!three.reduces(3 * 8, DataType.INT32), "sums of floating types only");
    }

    @Test
    void reduceScatterLeavesEachMemberItsPartOfTheSumAndTheInputAsItWas() {
        for (int members : new int[] {2, 3, 4}) {
            int elements = 8 * members;
            Memory mem = new Memory(members);
            initialFlags(mem, members);
            List<List<RecordedQueue>> queues = new ArrayList<>();
            for (int m = 0; m < members; m++) {
                putContribution(mem, m, elements);
                RecordedQueue q = new RecordedQueue();
                // scratch: the result's region; the part lands past it
                member(m, members, 16).reduceScatter(Memory.source(m), Memory.result(m),
                        Memory.result(m) + 4L * elements, 4L * elements, DataType.FLOAT32, q);
                queues.add(List.of(q));
            }
            run(mem, queues, members);
            int part = elements / members;
            for (int m = 0; m < members; m++) {
                for (int i = 0; i < part; i++) {
                    assertEquals(sumOfContributions(members, m * part + i),
                            mem.bytes.getFloat((int) (Memory.result(m) + 4L * (elements + i))),
                            members + " members: member " + m + "'s element " + i);
                }
                for (int i = 0; i < elements; i++) {
                    assertEquals(contribution(m, i), mem.bytes.getFloat((int) (Memory.source(m) + 4L * i)),
                            "member " + m + "'s input element " + i);
                }
            }
            assertFlagsAsInitially(mem, members);
        }
    }

    @Test
    void piecesFollowALayoutsChunksWhereverTheyLie() {
        // peer 0's chunks lie at rows 4 and 0, peer 1's at row 2: bytes 0..15 of peer 0's message are rows 4..5
        ChunkLayout layout = new ChunkLayout(new long[][] {{2, 2}, {2}}, new long[][] {{4, 0}, {2}}, 6);
        PeerCopies.Pieces pieces = PeerCopies.Pieces.of(layout, 8);
        assertEquals(32, pieces.total(0));
        assertArrayEquals(new long[] {32, 16}, pieces.locate(0, 0));
        assertArrayEquals(new long[] {40, 8}, pieces.locate(0, 8));
        assertArrayEquals(new long[] {0, 16}, pieces.locate(0, 16));
        assertArrayEquals(new long[] {16, 16}, pieces.locate(1, 0));
        assertThrows(IllegalStateException.class, () -> pieces.locate(1, 16));
        assertArrayEquals(new long[] {20, 10}, PeerCopies.Pieces.rankMajor(3, 10).locate(2, 0));
        assertArrayEquals(new long[] {3, 7}, PeerCopies.Pieces.same(3, 10).locate(2, 3));
    }

    @Test
    void theModeComesFromTheProperty() {
        assertEquals(NcclCommunicator.PeerCopyMode.CAPTURE, NcclCommunicator.peerCopyMode("capture"));
        assertEquals(NcclCommunicator.PeerCopyMode.ON, NcclCommunicator.peerCopyMode("true"));
        assertEquals(NcclCommunicator.PeerCopyMode.OFF, NcclCommunicator.peerCopyMode("off"));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> NcclCommunicator.peerCopyMode("always"));
        assertTrue(e.getMessage().contains("-Dmcore4j.nccl.peerCopies=always: expected off, capture or on"), e.getMessage());
        assertEquals(NcclCommunicator.PeerReductions.NONE, NcclCommunicator.peerReductions("false"));
        assertEquals(NcclCommunicator.PeerReductions.STARTED, NcclCommunicator.peerReductions("started"));
        assertEquals(NcclCommunicator.PeerReductions.ALL, NcclCommunicator.peerReductions("true"));
        e = assertThrows(IllegalArgumentException.class, () -> NcclCommunicator.peerReductions("some"));
        assertTrue(e.getMessage().contains("-Dmcore4j.nccl.peerReductions=some: expected false, started or true"),
                e.getMessage());
    }
}
