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
 *   <li>At most {@code capacity} are pending at once. One more closes (evicts) the oldest pending
 *       connection of the source address that holds the most pending ones, if that one has been
 *       pending for {@value #EVICTABLE_AFTER_MS} ms or more; otherwise the newcomer is refused. A real
 *       handshake takes milliseconds, so the connections that are evicted are those that hold a
 *       slot without finishing (slow or silent), the flood's own first; a real client, even from
 *       the flood's own address (all of loopback is one address), is not evicted in the first
 *       second of its handshake, and gets in as soon as it tries while a slot is held longer. A herd of
 *       real clients arriving together is served as before: the newcomers are refused and redial,
 *       and no handshake in progress is cut off.</li>
 * </ul>
 * A closed connection's handshake thread fails at its next read; {@link Slot#closedBecause} says
 * why, for the log. Thread-safe. Owns its reaper thread and the sockets still pending, which
 * {@link #close()} closes.
 */
public final class HandshakeSlots implements AutoCloseable {
    /** How long a connection must have been in its handshake before a newcomer may evict it. */
    public static final int EVICTABLE_AFTER_MS = 1_000;

    private final int capacity;
    private final long limitNanos;
    private final long evictableAfterNanos;
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
        this(capacity, limit, Duration.ofMillis(EVICTABLE_AFTER_MS), name);
    }

    /** With the age at which a pending connection may be evicted given (tests shorten it). */
    HandshakeSlots(int capacity, Duration limit, Duration evictableAfter, String name) {
        if (capacity < 1) {
            throw new IllegalArgumentException("capacity must be positive, got " + capacity);
        }
        if (limit.isNegative() || limit.isZero()) {
            throw new IllegalArgumentException("the handshake limit must be positive, got " + limit);
        }
        this.capacity = capacity;
        this.limitNanos = limit.toNanos();
        this.evictableAfterNanos = evictableAfter.toNanos();
        this.name = name;
        this.reaper = new Thread(this::reapLoop, "mcore4j-handshake-reaper-" + name);
        reaper.setDaemon(true);
        reaper.start();
    }

    /**
     * Admits {@code socket} into its handshake if a slot is free or can be freed by evicting the
     * oldest pending connection of the busiest source address (pending for
     * {@value #EVICTABLE_AFTER_MS} ms or more).
     *
     * @param socket an accepted connection
     * @return its slot, which the handshake must {@link Slot#finish}; null if every slot is held by
     *         a younger connection (or the slots are closed): the caller closes the socket, and the
     *         client redials
     */
    public Slot admit(Socket socket) {
        return admit(socket, socket.getInetAddress());
    }

    /** {@link #admit(Socket)} with the source address given (tests stand in other hosts with it). */
    synchronized Slot admit(Socket socket, InetAddress source) {
        long now = System.nanoTime();
        if (closed || pending.size() >= capacity && !evictOne(now)) {
            return null;
        }
        Slot slot = new Slot(socket, source, now, now + limitNanos);
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

    /** Evicts the oldest pending connection of the busiest source if it is old enough; says whether it did. */
    private boolean evictOne(long now) {
        Map<InetAddress, Integer> perSource = new HashMap<>();
        int most = 0;
        for (Slot s : pending) {
            most = Math.max(most, perSource.merge(s.source, 1, Integer::sum));
        }
        for (Iterator<Slot> it = pending.iterator(); it.hasNext(); ) {
            Slot s = it.next();
            if (perSource.get(s.source) == most) {
                if (now - s.admittedNanos < evictableAfterNanos) {
                    return false;
                }
                it.remove();
                s.closeBecause("evicted: " + capacity + " connections were in their handshake with " + name + ", this was the oldest of the "
                        + most + " from " + s.source.getHostAddress() + " (" + (now - s.admittedNanos) / 1_000_000 + " ms)");
                return true;
            }
        }
        return false;
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
        private final long admittedNanos;
        private final long deadlineNanos;
        private String closedBecause;

        private Slot(Socket socket, InetAddress source, long admittedNanos, long deadlineNanos) {
            this.socket = socket;
            this.source = source;
            this.admittedNanos = admittedNanos;
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
