package io.mcore4j.parallel.rendezvous;

import java.io.IOException;
import java.net.InetAddress;
import java.net.Socket;
import java.time.Duration;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashSet;
import java.util.Map;
import java.util.Set;

/**
 * The accepted connections that are still in their {@link Handshake}, bounded in number and in
 * time, so that connections which never finish (silent, or trickling a byte now and then) can
 * neither hold a listener's threads for long nor keep the real clients out.
 *
 * <ul>
 *   <li>A handshake has {@code limit} from its admission to its {@link Slot#finish}, however its
 *       bytes trickle in: past that, a reaper thread closes its socket.</li>
 *   <li>At most {@code capacity} are pending at once. Admitting one more does not turn the newcomer
 *       away: it closes (evicts) the oldest pending connection of the source address that holds the
 *       most pending ones. A flood therefore evicts its own connections first; a real client from
 *       the flooder's own address (all of loopback is one address) finishes its handshake in
 *       milliseconds and is evicted only if {@code capacity} newer connections arrive meanwhile,
 *       after which it redials like after any lost connection.</li>
 * </ul>
 * A closed connection's handshake thread fails at its next read; {@link Slot#closedBecause} says
 * why, for the log. Thread-safe. Owns its reaper thread and the sockets still pending, which
 * {@link #close()} closes.
 */
public final class HandshakeSlots implements AutoCloseable {
    private final int capacity;
    private final long limitNanos;
    private final String name;
    /** Pending slots in admission order, so the first is the oldest and the first to expire. */
    private final Set<Slot> pending = new LinkedHashSet<>();
    private final Thread reaper;
    private boolean closed;

    /**
     * Starts the reaper.
     *
     * @param capacity most connections in their handshake at once
     * @param limit longest a handshake may take from admission to finish
     * @param name the listener, for thread names and messages (e.g. {@code rendezvous store on port 29500})
     */
    public HandshakeSlots(int capacity, Duration limit, String name) {
        if (capacity < 1) {
            throw new IllegalArgumentException("capacity must be positive, got " + capacity);
        }
        if (limit.isNegative() || limit.isZero()) {
            throw new IllegalArgumentException("the handshake limit must be positive, got " + limit);
        }
        this.capacity = capacity;
        this.limitNanos = limit.toNanos();
        this.name = name;
        this.reaper = new Thread(this::reapLoop, "mcore4j-handshake-reaper-" + name);
        reaper.setDaemon(true);
        reaper.start();
    }

    /**
     * Admits {@code socket} into its handshake, evicting the oldest pending connection of the
     * busiest source address if all slots are taken. Once closed, the socket is closed at once.
     *
     * @param socket an accepted connection
     * @return its slot, which the handshake must {@link Slot#finish}
     */
    public Slot admit(Socket socket) {
        return admit(socket, socket.getInetAddress());
    }

    /** {@link #admit(Socket)} with the source address given (tests stand in other hosts with it). */
    synchronized Slot admit(Socket socket, InetAddress source) {
        Slot slot = new Slot(socket, source, System.nanoTime() + limitNanos);
        if (closed) {
            slot.closeBecause(name + " is closed");
            return slot;
        }
        if (pending.size() >= capacity) {
            evictOne();
        }
        pending.add(slot);
        notifyAll();
        return slot;
    }

    /** @return how many connections are in their handshake now */
    public synchronized int pending() {
        return pending.size();
    }

    /** Closes every pending connection and stops the reaper. Idempotent. */
    @Override
    public synchronized void close() {
        closed = true;
        for (Slot s : pending) {
            s.closeBecause(name + " is closed");
        }
        pending.clear();
        notifyAll();
    }

    private void evictOne() {
        Map<InetAddress, Integer> perSource = new HashMap<>();
        int most = 0;
        for (Slot s : pending) {
            most = Math.max(most, perSource.merge(s.source, 1, Integer::sum));
        }
        for (Iterator<Slot> it = pending.iterator(); it.hasNext(); ) {
            Slot s = it.next();
            if (perSource.get(s.source) == most) {
                it.remove();
                s.closeBecause("evicted: " + capacity + " connections were in their handshake with " + name + ", this was the oldest of the "
                        + most + " from " + s.source.getHostAddress());
                return;
            }
        }
    }

    private synchronized void reapLoop() {
        while (!closed) {
            long now = System.nanoTime();
            Iterator<Slot> it = pending.iterator();
            while (it.hasNext()) {
                Slot oldest = it.next();
                if (oldest.deadlineNanos - now > 0) {
                    break;
                }
                it.remove();
                oldest.closeBecause("its handshake did not finish within " + limitNanos / 1_000_000 + " ms");
            }
            try {
                if (pending.isEmpty()) {
                    wait();
                } else {
                    wait(Math.max(1, (pending.iterator().next().deadlineNanos - now) / 1_000_000 + 1));
                }
            } catch (InterruptedException e) {
                return;
            }
        }
    }

    /** One connection's place among the pending handshakes. */
    public final class Slot {
        private final Socket socket;
        private final InetAddress source;
        private final long deadlineNanos;
        private String closedBecause;

        private Slot(Socket socket, InetAddress source, long deadlineNanos) {
            this.socket = socket;
            this.source = source;
            this.deadlineNanos = deadlineNanos;
        }

        /**
         * Ends the handshake: the connection leaves the slots (idempotent). Call it once the
         * client's answer is read, before accepting it, and in any case when the handshake fails.
         *
         * @return true if the connection is still open; false if it was evicted or ran out of time
         *         (its socket is closed: drop it)
         */
        public boolean finish() {
            synchronized (HandshakeSlots.this) {
                pending.remove(this);
                return closedBecause == null;
            }
        }

        /** @return why the slots closed this connection, or null if they did not */
        public String closedBecause() {
            synchronized (HandshakeSlots.this) {
                return closedBecause;
            }
        }

        private void closeBecause(String why) {
            closedBecause = why;
            try {
                socket.close();
            } catch (IOException e) {
                // already broken: nothing to release
            }
        }
    }
}
