package io.mcore4j.parallel.rendezvous;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * {@link HandshakeSlots}: the limit covers the whole handshake, and a full set of slots evicts the
 * oldest connection of the busiest source address, once it has been pending long enough, instead
 * of turning the newcomer away. Sources
 * other than loopback are stood in by the package-private {@code admit(socket, source)}; every
 * socket is on loopback.
 */
class HandshakeSlotsTest {
    private static final InetAddress LOOPBACK = InetAddress.getLoopbackAddress();

    private final List<Socket> sockets = new ArrayList<>();
    private ServerSocket listener;

    @AfterEach
    void closeSockets() throws IOException {
        for (Socket s : sockets) {
            s.close();
        }
        if (listener != null) {
            listener.close();
        }
    }

    /** The accepting end of a fresh loopback connection. */
    private Socket accepted() throws IOException {
        if (listener == null) {
            listener = new ServerSocket(0, 50, LOOPBACK);
        }
        sockets.add(new Socket(LOOPBACK, listener.getLocalPort()));
        Socket s = listener.accept();
        sockets.add(s);
        return s;
    }

    @Test
    void aHandshakeStillPendingAtTheLimitIsClosedWhateverTrickledIn() throws Exception {
        try (HandshakeSlots slots = new HandshakeSlots(4, Duration.ofMillis(300), "test port")) {
            Socket slow = accepted();
            HandshakeSlots.Slot slot = slots.admit(slow);
            Socket quick = accepted();
            HandshakeSlots.Slot finished = slots.admit(quick);
            assertTrue(finished.finish());
            long start = System.nanoTime();
            while (!slow.isClosed() && System.nanoTime() - start < 3_000_000_000L) {
                Thread.sleep(10);
            }
            double seconds = (System.nanoTime() - start) / 1e9;
            assertTrue(slow.isClosed(), "still open after " + seconds + " s");
            assertTrue(seconds < 2, "closed after " + seconds + " s");
            assertFalse(slot.finish());
            assertEquals("its handshake did not finish within 300 ms", slot.closedBecause());
            assertFalse(quick.isClosed(), "a finished handshake's connection is not the slots' to close");
            assertNull(finished.closedBecause());
            assertEquals(0, slots.pending());
        }
    }

    @Test
    void aFullSetEvictsTheOldestOfTheBusiestSource() throws Exception {
        InetAddress flooder = InetAddress.getByAddress(new byte[] {10, 0, 0, 9});
        InetAddress rankHost = InetAddress.getByAddress(new byte[] {10, 0, 0, 2});
        try (HandshakeSlots slots = new HandshakeSlots(3, Duration.ofSeconds(30), Duration.ZERO, "test port")) {
            Socket rank = accepted();
            HandshakeSlots.Slot rankSlot = slots.admit(rank, rankHost); // the oldest of all
            Socket first = accepted();
            HandshakeSlots.Slot firstSlot = slots.admit(first, flooder);
            Socket second = accepted();
            slots.admit(second, flooder);
            Socket third = accepted();
            slots.admit(third, flooder);
            assertTrue(first.isClosed(), "the flooder's oldest connection is evicted, not the older one of the rank's host");
            assertFalse(rank.isClosed() || second.isClosed() || third.isClosed());
            assertTrue(firstSlot.closedBecause().startsWith(
                    "evicted: 3 connections were in their handshake with test port, this was the oldest of the 2 from 10.0.0.9 ("),
                    firstSlot.closedBecause());
            assertFalse(firstSlot.finish());
            assertTrue(rankSlot.finish(), "the rank's handshake finishes");
            assertEquals(2, slots.pending());
        }
    }

    @Test
    void fromOneSourceTheOldestIsEvictedOnceItHasBeenPendingLongEnough() throws Exception {
        try (HandshakeSlots slots = new HandshakeSlots(2, Duration.ofSeconds(30), Duration.ofMillis(300), "test port")) {
            Socket a = accepted();
            assertNotNull(slots.admit(a));
            Socket b = accepted();
            assertNotNull(slots.admit(b));
            // both are younger than 300 ms: a handshake in progress is not cut off, the newcomer is refused
            assertNull(slots.admit(accepted()));
            assertFalse(a.isClosed() || b.isClosed());
            Thread.sleep(400);
            Socket c = accepted();
            HandshakeSlots.Slot newcomer = slots.admit(c);
            assertNotNull(newcomer);
            assertTrue(a.isClosed());
            assertFalse(b.isClosed() || c.isClosed());
            assertTrue(newcomer.finish());
        }
    }

    @Test
    void closingClosesThePendingConnections() throws Exception {
        Socket pending = accepted();
        HandshakeSlots.Slot slot;
        HandshakeSlots closed;
        try (HandshakeSlots slots = new HandshakeSlots(2, Duration.ofSeconds(30), "test port")) {
            slot = slots.admit(pending);
            closed = slots;
        }
        assertTrue(pending.isClosed());
        assertEquals("test port is closed", slot.closedBecause());
        assertNull(closed.admit(accepted()), "closed slots admit nothing");
    }
}
