package io.mcore4j.parallel.tcp;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.net.Socket;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The connection between this process and one peer rank, shared by every communicator.
 *
 * <p>A reader thread decodes frames into the {@link Inbox} as they arrive, so a peer's writes never
 * wait for this process to call receive, and notices a dead peer at once (end of stream or reset).
 * A writer thread drains a queue of outgoing frames, so {@link #send} never blocks on the network:
 * a stalled peer cannot hang a caller, whose receive then fails at its deadline instead. Frames
 * between two ranks arrive in the order sent.
 *
 * <p>The reader thread also answers a peer's {@link Frame#STATUS_QUERY} itself, with what the inbox
 * says this process is waiting for ({@link Inbox#status}), so even a process blocked in a call
 * answers; and it hands the answers to this process's own queries to the inbox.
 *
 * <p>{@link #finish} sends a goodbye frame after everything queued and half-closes the socket;
 * {@link #awaitPeerFinished} waits for the peer's end of stream; {@link #abort} closes the socket.
 */
final class PeerLink {
    private static final Logger LOG = LoggerFactory.getLogger(PeerLink.class);
    private static final int BUFFER_BYTES = 1 << 16;

    private final int me;
    private final int peer;
    private final Socket socket;
    private final Inbox inbox;
    private final DataInputStream in;
    private final DataOutputStream out;
    private final LinkedBlockingQueue<Frame> outgoing = new LinkedBlockingQueue<>();
    private final Thread reader;
    private final Thread writer;
    private volatile boolean closing;

    PeerLink(int me, int peer, Socket socket, DataInputStream in, DataOutputStream out, Inbox inbox) throws IOException {
        this.me = me;
        this.peer = peer;
        this.socket = socket;
        this.inbox = inbox;
        this.in = in;
        this.out = out;
        socket.setSoTimeout(0);
        this.reader = new Thread(this::readLoop, "mcore4j-tcp-" + me + "-from-" + peer);
        this.writer = new Thread(this::writeLoop, "mcore4j-tcp-" + me + "-to-" + peer);
        reader.setDaemon(true);
        writer.setDaemon(true);
        reader.start();
        writer.start();
    }

    /** Buffered streams over {@code socket}, for the handshake and then the link. */
    static DataInputStream input(Socket socket) throws IOException {
        return input(socket.getInputStream());
    }

    /** A buffered stream over {@code raw} (a socket's input, possibly limited by a deadline), for the handshake and then the link. */
    static DataInputStream input(InputStream raw) {
        return new DataInputStream(new BufferedInputStream(raw, BUFFER_BYTES));
    }

    static DataOutputStream output(Socket socket) throws IOException {
        return new DataOutputStream(new BufferedOutputStream(socket.getOutputStream(), BUFFER_BYTES));
    }

    /** Queues {@code frame}; it is dropped if the link has failed (receivers learn that from the inbox). */
    void send(Frame frame) {
        outgoing.add(frame);
    }

    /** Sends {@code goodbye} after everything queued, then half-closes: the peer sees a clean end. */
    void finish(Frame goodbye) {
        closing = true;
        outgoing.add(goodbye);
    }

    /**
     * Waits until everything queued, the goodbye included, has been written (or the link failed).
     *
     * @return true if it was within {@code millis}
     */
    boolean awaitSent(long millis) {
        try {
            writer.join(Math.max(1, millis));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        return !writer.isAlive();
    }

    /**
     * Waits until the peer has closed its side too (or the link failed).
     *
     * @return true if it did within {@code millis}
     */
    boolean awaitPeerFinished(long millis) {
        try {
            reader.join(Math.max(1, millis));
            writer.join(Math.max(1, millis));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        return !reader.isAlive();
    }

    /** Closes the socket, ending both threads. */
    void abort() {
        closing = true;
        try {
            socket.close();
        } catch (IOException e) {
            LOG.debug("closing link {} -> {}", me, peer, e);
        }
        outgoing.clear();
        outgoing.add(Frame.goodbye());
    }

    private void readLoop() {
        try {
            while (true) {
                Frame f = Frame.readFrom(in);
                if (f.kind() == Frame.GOODBYE) {
                    if (f.operation().isEmpty()) {
                        inbox.gone(peer, "rank " + peer + " closed its backend");
                    } else {
                        inbox.gone(peer, "rank " + peer + " closed its backend after a failure: " + f.operation(), f.blamed());
                    }
                } else if (f.kind() == Frame.STATUS_QUERY) {
                    outgoing.add(inbox.status().reply(f.sequence()));
                } else if (f.kind() == Frame.STATUS_REPLY) {
                    inbox.answer(peer, f.sequence(), PeerStatus.of(f));
                } else {
                    inbox.deliver(peer, f);
                }
            }
        } catch (EOFException e) {
            inbox.gone(peer, "rank " + peer + " closed the connection without a goodbye (its process probably died)");
        } catch (IOException | RuntimeException e) {
            inbox.gone(peer, closing ? "this rank closed its connection to rank " + peer
                    : "the connection to rank " + peer + " failed: " + e.getMessage());
            if (!closing) {
                LOG.warn("rank {}: connection to rank {} failed: {}", me, peer, e.toString());
            }
        }
    }

    private void writeLoop() {
        try {
            while (true) {
                Frame f = outgoing.poll(1, TimeUnit.HOURS);
                if (f == null) {
                    continue;
                }
                f.writeTo(out);
                if (f.kind() == Frame.GOODBYE) {
                    out.flush();
                    socket.shutdownOutput();
                    return;
                }
                if (outgoing.isEmpty()) {
                    out.flush();
                }
            }
        } catch (IOException e) {
            if (!closing) {
                inbox.gone(peer, "sending to rank " + peer + " failed: " + e.getMessage());
                LOG.warn("rank {}: sending to rank {} failed: {}", me, peer, e.toString());
            }
            // the reader would otherwise wait for a peer that may never write again
            abort();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
