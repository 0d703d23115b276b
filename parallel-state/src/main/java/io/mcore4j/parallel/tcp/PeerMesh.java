package io.mcore4j.parallel.tcp;

import io.mcore4j.parallel.CommunicationException;
import io.mcore4j.parallel.rendezvous.DeadlineInputStream;
import io.mcore4j.parallel.rendezvous.Handshake;
import io.mcore4j.parallel.rendezvous.HandshakeSlots;
import io.mcore4j.parallel.rendezvous.JobToken;
import io.mcore4j.parallel.rendezvous.StoreTimeoutException;
import io.mcore4j.parallel.rendezvous.TcpStore;

import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.nio.charset.StandardCharsets;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A full mesh of {@link PeerLink}s: one TCP connection between every pair of ranks, shared by all
 * communicators, plus the {@link Inbox} their reader threads fill.
 *
 * <p>Establishing it: every rank listens on a free port and publishes {@code host:port} in the
 * store under {@code mcore4j/peer/<rank>}; then it dials every lower rank (proving the job token,
 * checking the peer proves it too and that it reached the rank it meant to) and accepts every
 * higher rank (checking their proof, rank and world size; anything else is rejected and logged,
 * the first ten individually, then every hundredth, and the rank keeps waiting). Accepted
 * connections shake hands in parallel, each on its own short-lived thread, within
 * {@value #HANDSHAKE_TIMEOUT_MS} ms in all however their bytes trickle in; at most
 * {@value #MAX_PENDING_HANDSHAKES} at once, one more evicting the oldest of the busiest source
 * address once that one has been pending for a second, else closed at once (see
 * {@link HandshakeSlots}; a dialer whose connection is closed redials). So silent, slow or hostile
 * connections to the peer port cannot delay or keep out the real peers. Lower ranks accept before
 * they could wait on anyone higher, so establishing cannot deadlock.
 */
final class PeerMesh {
    private static final Logger LOG = LoggerFactory.getLogger(PeerMesh.class);
    private static final String GROUP = "world";
    private static final String CONNECT = "connect";
    /** Most accepted connections in their handshake at once; one more evicts one pending for a second or more, if any. */
    static final int MAX_PENDING_HANDSHAKES = 64;
    /** Longest an accepted connection's handshake may take, from its acceptance to its end. */
    static final int HANDSHAKE_TIMEOUT_MS = 10_000;
    private static final int ACCEPT_POLL_MS = 100;
    private static final int LOGGED_REJECTIONS = 10;
    private static final int REJECTION_LOG_EVERY = 100;

    private final int rank;
    private final PeerLink[] links;
    private final Inbox inbox;

    private PeerMesh(int rank, PeerLink[] links, Inbox inbox) {
        this.rank = rank;
        this.links = links;
        this.inbox = inbox;
    }

    static String addressKey(int rank) {
        return "mcore4j/peer/" + rank;
    }

    /**
     * Connects this rank to every other rank.
     *
     * @throws CommunicationException naming the ranks that did not publish, answer or connect in time
     */
    static PeerMesh establish(int rank, int worldSize, JobToken token, TcpStore store, String advertiseHost,
                              InetAddress bindAddress, long deadlineNanos, long timeoutMillis) {
        Inbox inbox = new Inbox(rank);
        PeerLink[] links = new PeerLink[worldSize];
        SecureRandom random = new SecureRandom();
        token.checkMayListen(bindAddress, "rank " + rank + "'s peer port");
        try (ServerSocket listener = new ServerSocket()) {
            listener.bind(new InetSocketAddress(bindAddress, 0), Math.max(50, worldSize));
            store.set(addressKey(rank), (advertiseHost + ":" + listener.getLocalPort()).getBytes(StandardCharsets.UTF_8));
            for (int peer = 0; peer < rank; peer++) {
                links[peer] = dial(rank, worldSize, peer, token, store, inbox, random, deadlineNanos, timeoutMillis);
            }
            acceptHigherRanks(listener, rank, worldSize, token, links, inbox, random, deadlineNanos, timeoutMillis);
            return new PeerMesh(rank, links, inbox);
        } catch (IOException | RuntimeException e) {
            for (PeerLink l : links) {
                if (l != null) {
                    l.abort();
                }
            }
            if (e instanceof CommunicationException ce) {
                throw ce;
            }
            throw new CommunicationException(GROUP, CONNECT, List.of(), "rank " + rank + " could not join the mesh: " + e, e);
        }
    }

    private static PeerLink dial(int rank, int worldSize, int peer, JobToken token, TcpStore store, Inbox inbox,
                                 SecureRandom random, long deadlineNanos, long timeoutMillis) {
        String address;
        try {
            long remaining = Math.max(1, (deadlineNanos - System.nanoTime()) / 1_000_000);
            address = new String(store.get(addressKey(peer), java.time.Duration.ofMillis(remaining)), StandardCharsets.UTF_8);
        } catch (StoreTimeoutException e) {
            throw new CommunicationException(GROUP, CONNECT, List.of(peer), "rank " + peer
                    + " did not publish its address within " + timeoutMillis + " ms", e);
        }
        int colon = address.lastIndexOf(':');
        String host = address.substring(0, colon);
        int port = Integer.parseInt(address.substring(colon + 1));
        IOException last = null;
        while (true) {
            long remaining = (deadlineNanos - System.nanoTime()) / 1_000_000;
            if (remaining <= 0) {
                throw new CommunicationException(GROUP, CONNECT, List.of(peer), "could not connect to rank " + peer
                        + " at " + address + " within " + timeoutMillis + " ms: " + last, last);
            }
            Socket s = new Socket();
            try {
                s.setTcpNoDelay(true);
                s.connect(new InetSocketAddress(host, port), (int) Math.min(remaining, 5_000));
                // the whole handshake, however the other side trickles its bytes, ends by the connect deadline
                DeadlineInputStream input = new DeadlineInputStream(s);
                input.setDeadline(deadlineNanos);
                DataInputStream in = PeerLink.input(input);
                DataOutputStream out = PeerLink.output(s);
                Handshake.respond(in, out, token, Handshake.PEER, rank, worldSize, peer, random);
                input.clearDeadline();
                return new PeerLink(rank, peer, s, in, out, inbox);
            } catch (Handshake.RejectedException e) {
                closeQuietly(s);
                throw new CommunicationException(GROUP, CONNECT, List.of(peer), "rank " + peer + " at " + address
                        + " refused rank " + rank + ": " + e.getMessage(), e);
            } catch (IOException e) {
                closeQuietly(s);
                last = e;
                sleep(50);
            }
        }
    }

    private static void acceptHigherRanks(ServerSocket listener, int rank, int worldSize, JobToken token, PeerLink[] links,
                                          Inbox inbox, SecureRandom random, long deadlineNanos, long timeoutMillis)
            throws IOException {
        Acceptance acceptance = new Acceptance(rank, worldSize, token, links, inbox, random, deadlineNanos);
        try {
            while (!acceptance.complete()) {
                long remaining = (deadlineNanos - System.nanoTime()) / 1_000_000;
                if (remaining <= 0) {
                    List<Integer> missing = acceptance.missing();
                    throw new CommunicationException(GROUP, CONNECT, missing, "rank(s) " + missing + " did not connect to rank "
                            + rank + " within " + timeoutMillis + " ms" + acceptance.rejections(), null);
                }
                listener.setSoTimeout((int) Math.max(1, Math.min(remaining, ACCEPT_POLL_MS)));
                Socket s;
                try {
                    s = listener.accept();
                } catch (SocketTimeoutException e) {
                    continue;
                }
                acceptance.handshakeAsync(s);
            }
        } finally {
            acceptance.stop();
        }
    }

    /**
     * The handshakes of the connections a rank accepts, each on its own daemon thread: a connection
     * that stays silent, trickles or fails holds only its own thread (until its handshake limit or
     * its eviction), never the accept loop or another peer's handshake.
     */
    private static final class Acceptance {
        private final int rank;
        private final int worldSize;
        private final JobToken token;
        private final PeerLink[] links;
        private final Inbox inbox;
        private final SecureRandom random;
        private final long deadlineNanos;
        private final HandshakeSlots slots;
        private String firstRejection;
        private int rejectedCount;
        private int accepted;
        private boolean stopped;

        Acceptance(int rank, int worldSize, JobToken token, PeerLink[] links, Inbox inbox, SecureRandom random,
                   long deadlineNanos) {
            this.rank = rank;
            this.worldSize = worldSize;
            this.token = token;
            this.links = links;
            this.inbox = inbox;
            this.random = random;
            this.deadlineNanos = deadlineNanos;
            this.slots = new HandshakeSlots(MAX_PENDING_HANDSHAKES, Duration.ofMillis(HANDSHAKE_TIMEOUT_MS),
                    "rank " + rank + "'s peer port");
        }

        synchronized boolean complete() {
            return accepted == worldSize - 1 - rank;
        }

        synchronized List<Integer> missing() {
            List<Integer> out = new ArrayList<>();
            for (int r = rank + 1; r < worldSize; r++) {
                if (links[r] == null) {
                    out.add(r);
                }
            }
            return out;
        }

        /** @return {@code "; rejected N connection(s), e.g. ..."} or empty */
        synchronized String rejections() {
            return rejectedCount == 0 ? "" : "; rejected " + rejectedCount + " other connection(s), the first from " + firstRejection;
        }

        /**
         * Ends acceptance: connections still in their handshake are closed, and a handshake
         * finishing later closes its connection instead of joining.
         */
        void stop() {
            synchronized (this) {
                stopped = true;
            }
            slots.close();
        }

        void handshakeAsync(Socket s) {
            HandshakeSlots.Slot slot = slots.admit(s);
            if (slot == null) {
                closeQuietly(s);
                rejected(s, MAX_PENDING_HANDSHAKES + " handshakes are in progress, none for " + HandshakeSlots.EVICTABLE_AFTER_MS
                        + " ms yet");
                return;
            }
            Thread t = new Thread(() -> {
                try {
                    handshake(s, slot);
                } finally {
                    slot.finish();
                }
            }, "mcore4j-tcp-" + rank + "-handshake-" + s.getRemoteSocketAddress());
            t.setDaemon(true);
            t.start();
        }

        private void handshake(Socket s, HandshakeSlots.Slot slot) {
            try {
                long remaining = (deadlineNanos - System.nanoTime()) / 1_000_000;
                s.setTcpNoDelay(true);
                s.setSoTimeout((int) Math.max(1, Math.min(remaining, HANDSHAKE_TIMEOUT_MS)));
                DataInputStream in = PeerLink.input(s);
                DataOutputStream out = PeerLink.output(s);
                Handshake.Hello hello = Handshake.challenge(in, out, token, Handshake.PEER, rank, worldSize, random);
                if (!slot.finish()) {
                    throw new IOException(slot.closedBecause());
                }
                synchronized (this) {
                    String problem = stopped ? "rank " + rank + " is no longer accepting"
                            : hello.worldSize() != worldSize ? "world size " + hello.worldSize() + " differs from " + worldSize
                            : hello.rank() <= rank || hello.rank() >= worldSize ? "rank " + hello.rank() + " should not dial rank " + rank
                            : links[hello.rank()] != null ? "rank " + hello.rank() + " is already connected"
                            : null;
                    if (problem != null) {
                        Handshake.reject(out, problem);
                        throw new Handshake.RejectedException(problem);
                    }
                    Handshake.accept(out, hello);
                    links[hello.rank()] = new PeerLink(rank, hello.rank(), s, in, out, inbox);
                    accepted++;
                }
            } catch (IOException e) {
                slot.finish();
                closeQuietly(s);
                rejected(s, slot.closedBecause() != null ? slot.closedBecause() : e.getMessage());
            }
        }

        /** Counts and logs (the first ten, then every hundredth) a connection closed without joining. */
        private void rejected(Socket s, String why) {
            int n;
            synchronized (this) {
                n = ++rejectedCount;
                if (n == 1) {
                    firstRejection = s.getRemoteSocketAddress() + ": " + why;
                }
            }
            if (n <= LOGGED_REJECTIONS || n % REJECTION_LOG_EVERY == 0) {
                LOG.warn("rank {}: rejected a peer connection from {}: {}{}", rank, s.getRemoteSocketAddress(), why,
                        n == LOGGED_REJECTIONS ? " (further rejections are logged every " + REJECTION_LOG_EVERY + "th)"
                                : n > LOGGED_REJECTIONS ? " (" + n + " rejected so far)" : "");
            }
        }
    }

    /**
     * Hands {@code frame} to {@code peer}'s link (or straight to the inbox for this rank).
     *
     * @throws CommunicationException if the peer is already known to be gone, naming it, or the
     *         ranks its failure blamed if it left after one
     */
    void send(int peer, Frame frame, String groupKey, String operation) {
        if (peer == rank) {
            inbox.deliver(rank, frame);
            return;
        }
        String gone = inbox.goneReason(peer);
        if (gone != null) {
            List<Integer> blamed = inbox.blameFor(peer);
            String root = blamed.equals(List.of(peer)) ? "" : " (the root cause: rank(s) " + blamed + ")";
            throw new CommunicationException(groupKey, operation, blamed, "rank(s) [" + peer + "] will not answer: " + gone + root, null);
        }
        links[peer].send(frame);
    }

    /**
     * Hands {@code frame} to {@code peer}'s link unless the peer is known to be gone, in which case
     * the frame is dropped: a collective still sends to every live member before it reports the
     * dead one, so that the survivors wait only for the dead rank and all of them name it.
     */
    void offer(int peer, Frame frame) {
        if (peer == rank) {
            inbox.deliver(rank, frame);
        } else if (inbox.goneReason(peer) == null) {
            links[peer].send(frame);
        }
    }

    Inbox inbox() {
        return inbox;
    }

    /**
     * Takes the next frame of {@code channel}/{@code kind} from each sender (see
     * {@link Inbox#take}); at the deadline, asks the missing ranks what they wait for
     * ({@link WaitChain}, for at most {@link #graceMillis}) and blames the rank their chain ends at.
     *
     * @throws CommunicationException if a sender is gone or the deadline passes
     */
    Frame[] take(String channel, byte kind, int[] from, long deadlineNanos, long timeoutMillis, String groupKey, String operation) {
        return inbox.take(channel, kind, from, deadlineNanos, timeoutMillis, groupKey, operation,
                new WaitChain(rank, inbox, this::offer, graceMillis(timeoutMillis)));
    }

    /**
     * How long a rank whose call timed out waits for the answers to its status queries: a quarter of
     * the timeout, at least 1 s (a loaded machine) and at most 5 s (it delays every stall's report).
     */
    static long graceMillis(long timeoutMillis) {
        return Math.min(5_000, Math.max(1_000, timeoutMillis / 4));
    }

    /**
     * Says goodbye to every peer after the frames already queued, waits up to {@code waitMillis} for
     * their goodbyes (so that nothing either side sent is cut off), then closes every connection.
     */
    void close(long waitMillis) {
        for (PeerLink l : links) {
            if (l != null) {
                l.finish(Frame.goodbye());
            }
        }
        long deadline = System.nanoTime() + waitMillis * 1_000_000;
        for (PeerLink l : links) {
            if (l != null && !l.awaitPeerFinished((deadline - System.nanoTime()) / 1_000_000)) {
                LOG.debug("rank {}: a peer did not close its side within {} ms", rank, waitMillis);
            }
        }
        abortAll();
    }

    /**
     * Closes after a failure: tells every peer what failed and whom it blamed (waiting at most
     * {@code sendMillis} for those goodbyes to be written), but waits for no peer's goodbye, since a
     * stalled peer would never send one.
     */
    void closeAfterFailure(String cause, List<Integer> blamed, long sendMillis) {
        Frame goodbye = Frame.goodbye(cause, blamed);
        for (PeerLink l : links) {
            if (l != null) {
                l.finish(goodbye);
            }
        }
        long deadline = System.nanoTime() + sendMillis * 1_000_000;
        for (PeerLink l : links) {
            if (l != null && !l.awaitSent((deadline - System.nanoTime()) / 1_000_000)) {
                LOG.debug("rank {}: a goodbye was not written within {} ms", rank, sendMillis);
            }
        }
        abortAll();
    }

    private void abortAll() {
        for (PeerLink l : links) {
            if (l != null) {
                l.abort();
            }
        }
        inbox.close("the backend of rank " + rank + " is closed");
    }

    private static void sleep(long millis) {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new CommunicationException(GROUP, CONNECT, List.of(), "interrupted", e);
        }
    }

    private static void closeQuietly(Socket s) {
        try {
            s.close();
        } catch (IOException e) {
            // already broken: nothing to release
        }
    }
}
