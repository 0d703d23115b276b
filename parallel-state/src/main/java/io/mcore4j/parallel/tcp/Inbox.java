package io.mcore4j.parallel.tcp;

import io.mcore4j.parallel.CommunicationException;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;

/**
 * Frames received by one process, queued per (channel, kind, sender) in arrival order, and the
 * peers that will send nothing more (connection lost or closed) with the reason.
 *
 * <p>Link reader threads {@link #deliver} and report {@link #gone} peers; communicator threads
 * {@link #take} the frames of one call. A take fails as soon as a sender it still waits for is
 * gone (a dead peer's closed socket fails the call at once) and otherwise at its deadline, naming
 * the missing ranks in both cases. Frames that arrived before a peer left are still delivered. A
 * peer that left after a failure of its own passes on the ranks that failure blamed, and a take
 * that fails because of it names those ranks (the root cause), not the peer that left. A take
 * that reaches its deadline first asks the ranks it waits for what they wait for
 * ({@link WaitChain}) and names the rank at the end of that chain, since a peer it waits for may
 * itself be waiting for the real culprit.
 *
 * <p>The inbox also keeps what this process would answer to such a question ({@link #status}):
 * the ranks its takes in progress still wait for and its first failure; and it collects the
 * answers to this process's own questions ({@link #answer}).
 */
final class Inbox {
    private record Key(String channel, byte kind, int from) {}

    private record Gone(String reason, List<Integer> blamed) {}

    /** A take in progress, described for {@link #status}. */
    private record Waiting(String channel, byte kind, int[] from, String call) {}

    private final int self;
    private final Map<Key, ArrayDeque<Frame>> queues = new HashMap<>();
    private final Map<Integer, Gone> gone = new HashMap<>();
    private final List<Waiting> waiting = new ArrayList<>();
    private final Map<Long, Map<Integer, PeerStatus>> answers = new HashMap<>();
    private long lastQuery;
    private String failure = "";
    private List<Integer> failureBlamed = List.of();
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

    /**
     * @param peer a peer that is {@link #goneReason gone}
     * @return the ranks to blame for it: what it blamed when it left after a failure (less this
     *         rank and itself), else itself
     */
    synchronized List<Integer> blameFor(int peer) {
        return blame(List.of(peer));
    }

    /** The ranks to blame for {@code lost} peers: what they blamed when they left after a failure, else themselves. */
    private List<Integer> blame(List<Integer> lost) {
        TreeSet<Integer> out = new TreeSet<>();
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
     * Records this process's first communication failure, which {@link #status} reports to peers
     * that ask (later ones are ignored).
     *
     * @return {@code e}
     */
    synchronized CommunicationException failed(CommunicationException e) {
        if (failure.isEmpty()) {
            failure = e.getMessage() == null ? e.toString() : e.getMessage();
            failureBlamed = e.ranks();
        }
        return e;
    }

    /** @return what this process answers to a peer's status query now */
    synchronized PeerStatus status() {
        TreeSet<Integer> waitingFor = new TreeSet<>();
        String call = "";
        for (Waiting w : waiting) {
            List<Integer> missing = missing(w.channel(), w.kind(), w.from());
            if (!missing.isEmpty() && call.isEmpty()) {
                call = w.call();
            }
            waitingFor.addAll(missing);
        }
        return new PeerStatus(new ArrayList<>(waitingFor), call, failure, failureBlamed);
    }

    /** Opens a status query of this process's; answers to it are kept until {@link #closeQuery}. */
    synchronized long openQuery() {
        long id = ++lastQuery;
        answers.put(id, new HashMap<>());
        return id;
    }

    /** Keeps {@code peer}'s answer to query {@code id}, if it is still open (the first answer counts). */
    synchronized void answer(int peer, long id, PeerStatus status) {
        Map<Integer, PeerStatus> got = answers.get(id);
        if (got != null) {
            got.putIfAbsent(peer, status);
            notifyAll();
        }
    }

    synchronized void closeQuery(long id) {
        answers.remove(id);
    }

    /**
     * Waits until query {@code id} has more than {@code known} answers, every rank in
     * {@code asked} has answered or is gone, the deadline passes or the inbox closes.
     *
     * @return the answers so far, by rank (a copy)
     */
    synchronized Map<Integer, PeerStatus> awaitAnswers(long id, Set<Integer> asked, int known, long deadlineNanos) {
        while (true) {
            Map<Integer, PeerStatus> got = answers.getOrDefault(id, Map.of());
            boolean settled = true;
            for (int r : asked) {
                settled &= got.containsKey(r) || gone.containsKey(r);
            }
            long remaining = deadlineNanos - System.nanoTime();
            if (got.size() > known || settled || remaining <= 0 || closed != null) {
                return new HashMap<>(got);
            }
            try {
                wait(Math.max(1, remaining / 1_000_000));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return new HashMap<>(got);
            }
        }
    }

    /**
     * Removes and returns the next frame of {@code channel}/{@code kind} from each sender, once all
     * have one. At the deadline, {@code chain} finds whom to blame before the take fails.
     *
     * @param from global rank of each sender, -1 where no frame is expected
     * @param deadlineNanos {@link System#nanoTime()} at which to give up
     * @param timeoutMillis the timeout, for the message
     * @param groupKey the group, for the exception
     * @param operation the call, for the exception
     * @param chain asks the missing ranks, at the deadline, what they wait for
     * @return the frames, indexed like {@code from} (null where -1)
     * @throws CommunicationException if a sender is gone or the deadline passes, naming the missing
     *         ranks, or the ranks at the end of the chain they wait in (also recorded by {@link #failed})
     */
    Frame[] take(String channel, byte kind, int[] from, long deadlineNanos, long timeoutMillis, String groupKey,
                 String operation, WaitChain chain) {
        Waiting w = new Waiting(channel, kind, from, groupKey + " " + operation);
        synchronized (this) {
            waiting.add(w);
        }
        try {
            Frame[] got = awaitFrames(channel, kind, from, deadlineNanos, groupKey, operation);
            if (got != null) {
                return got;
            }
            List<Integer> missing;
            synchronized (this) {
                missing = missing(channel, kind, from);
            }
            // still registered as waiting: a peer asking this rank meanwhile learns whom it waits for
            WaitChain.Verdict verdict = chain.trace(missing);
            throw failed(new CommunicationException(groupKey, operation, verdict.roots(),
                    "timed out after " + timeoutMillis + " ms waiting for rank(s) " + missing + verdict.explanation(), null));
        } finally {
            synchronized (this) {
                waiting.remove(w);
            }
        }
    }

    /** The frames once all have arrived, or null at the deadline; throws if the inbox closes or a sender is gone. */
    private synchronized Frame[] awaitFrames(String channel, byte kind, int[] from, long deadlineNanos, String groupKey,
                                             String operation) {
        while (true) {
            if (closed != null) {
                throw failed(new CommunicationException(groupKey, operation, List.of(), closed, null));
            }
            List<Integer> missing = missing(channel, kind, from);
            if (missing.isEmpty()) {
                Frame[] out = new Frame[from.length];
                for (int i = 0; i < from.length; i++) {
                    if (from[i] >= 0) {
                        out[i] = queues.get(new Key(channel, kind, from[i])).removeFirst();
                    }
                }
                return out;
            }
            List<Integer> lost = new ArrayList<>();
            for (int r : missing) {
                if (gone.containsKey(r)) {
                    lost.add(r);
                }
            }
            if (!lost.isEmpty()) {
                StringBuilder why = new StringBuilder();
                for (int r : lost) {
                    why.append(why.length() == 0 ? "" : "; ").append(gone.get(r).reason());
                }
                List<Integer> blamed = blame(lost);
                String root = blamed.equals(lost) ? "" : " (the root cause: rank(s) " + blamed + ")";
                throw failed(new CommunicationException(groupKey, operation, blamed, "rank(s) " + lost + " will not answer: " + why
                        + root, null));
            }
            long remaining = deadlineNanos - System.nanoTime();
            if (remaining <= 0) {
                return null;
            }
            try {
                wait(Math.max(1, remaining / 1_000_000));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw failed(new CommunicationException(groupKey, operation, List.of(), "interrupted", e));
            }
        }
    }

    /** The senders in {@code from} without a queued frame of {@code channel}/{@code kind}. */
    private List<Integer> missing(String channel, byte kind, int[] from) {
        List<Integer> missing = new ArrayList<>();
        for (int f : from) {
            if (f >= 0) {
                ArrayDeque<Frame> q = queues.get(new Key(channel, kind, f));
                if (q == null || q.isEmpty()) {
                    missing.add(f);
                }
            }
        }
        return missing;
    }
}
