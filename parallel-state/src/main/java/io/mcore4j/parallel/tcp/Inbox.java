package io.mcore4j.parallel.tcp;

import io.mcore4j.parallel.CommunicationException;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Frames received by one process, queued per (channel, kind, sender) in arrival order, and the
 * peers that will send nothing more (connection lost or closed) with the reason.
 *
 * <p>Link reader threads {@link #deliver} and report {@link #gone} peers; communicator threads
 * {@link #take} the frames of one call. A take fails as soon as a sender it still waits for is
 * gone (a dead peer's closed socket fails the call at once) and otherwise at its deadline, naming
 * the missing ranks in both cases. Frames that arrived before a peer left are still delivered. A
 * peer that left after a failure of its own passes on the ranks that failure blamed, and a take
 * that fails because of it names those ranks (the root cause), not the peer that left.
 */
final class Inbox {
    private record Key(String channel, byte kind, int from) {}

    private record Gone(String reason, List<Integer> blamed) {}

    private final int self;
    private final Map<Key, ArrayDeque<Frame>> queues = new HashMap<>();
    private final Map<Integer, Gone> gone = new HashMap<>();
    private String closed;

    /** @param self the global rank of this process, never blamed for its own take */
    Inbox(int self) {
        this.self = self;
    }

    synchronized void deliver(int from, Frame frame) {
        if (closed != null) {
            return;
        }
        queues.computeIfAbsent(new Key(frame.channel(), frame.kind(), from), k -> new ArrayDeque<>()).addLast(frame);
        notifyAll();
    }

    /** Records that {@code peer} will send nothing more; the first reason given is kept. */
    synchronized void gone(int peer, String reason) {
        gone(peer, reason, List.of());
    }

    /**
     * Records that {@code peer} will send nothing more because of a failure that blamed
     * {@code blamed}; the first reason given is kept.
     */
    synchronized void gone(int peer, String reason, List<Integer> blamed) {
        gone.putIfAbsent(peer, new Gone(reason, List.copyOf(blamed)));
        notifyAll();
    }

    /** @return why {@code peer} is gone, or null while it is connected */
    synchronized String goneReason(int peer) {
        Gone g = gone.get(peer);
        return g == null ? null : g.reason();
    }

    /** The ranks to blame for {@code lost} peers: what they blamed when they left after a failure, else themselves. */
    private List<Integer> blame(List<Integer> lost) {
        java.util.TreeSet<Integer> out = new java.util.TreeSet<>();
        for (int r : lost) {
            List<Integer> theirs = new ArrayList<>(gone.get(r).blamed());
            theirs.remove(Integer.valueOf(self));
            theirs.remove(Integer.valueOf(r));
            if (theirs.isEmpty()) {
                out.add(r);
            } else {
                out.addAll(theirs);
            }
        }
        return new ArrayList<>(out);
    }

    /** Fails every current and later take: this process's backend is closing. */
    synchronized void close(String reason) {
        if (closed == null) {
            closed = reason;
        }
        queues.clear();
        notifyAll();
    }

    /**
     * Removes and returns the next frame of {@code channel}/{@code kind} from each sender, once all
     * have one.
     *
     * @param from global rank of each sender, -1 where no frame is expected
     * @param deadlineNanos {@link System#nanoTime()} at which to give up
     * @param timeoutMillis the timeout, for the message
     * @param groupKey the group, for the exception
     * @param operation the call, for the exception
     * @return the frames, indexed like {@code from} (null where -1)
     * @throws CommunicationException if a sender is gone or the deadline passes, naming the missing ranks
     */
    synchronized Frame[] take(String channel, byte kind, int[] from, long deadlineNanos, long timeoutMillis,
                              String groupKey, String operation) {
        while (true) {
            if (closed != null) {
                throw new CommunicationException(groupKey, operation, List.of(), closed, null);
            }
            List<Integer> missing = new ArrayList<>();
            List<Integer> lost = new ArrayList<>();
            for (int f : from) {
                if (f >= 0) {
                    ArrayDeque<Frame> q = queues.get(new Key(channel, kind, f));
                    if (q == null || q.isEmpty()) {
                        missing.add(f);
                        if (gone.containsKey(f)) {
                            lost.add(f);
                        }
                    }
                }
            }
            if (missing.isEmpty()) {
                Frame[] out = new Frame[from.length];
                for (int i = 0; i < from.length; i++) {
                    if (from[i] >= 0) {
                        out[i] = queues.get(new Key(channel, kind, from[i])).removeFirst();
                    }
                }
                return out;
            }
            if (!lost.isEmpty()) {
                StringBuilder why = new StringBuilder();
                for (int r : lost) {
                    why.append(why.length() == 0 ? "" : "; ").append(gone.get(r).reason());
                }
                List<Integer> blamed = blame(lost);
                String root = blamed.equals(lost) ? "" : " (the root cause: rank(s) " + blamed + ")";
                throw new CommunicationException(groupKey, operation, blamed, "rank(s) " + lost + " will not answer: " + why
                        + root, null);
            }
            long remaining = deadlineNanos - System.nanoTime();
            if (remaining <= 0) {
                throw new CommunicationException(groupKey, operation, missing,
                        "timed out after " + timeoutMillis + " ms waiting for rank(s) " + missing, null);
            }
            try {
                wait(Math.max(1, remaining / 1_000_000));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new CommunicationException(groupKey, operation, List.of(), "interrupted", e);
            }
        }
    }
}
