package io.mcore4j.parallel.rendezvous;

import java.io.FilterInputStream;
import java.io.IOException;
import java.net.Socket;
import java.net.SocketTimeoutException;

/**
 * A socket's input whose reads, while a deadline is set, all end by that deadline: each read waits
 * at most the time left, so a peer that trickles bytes (one now and then, each within any per-read
 * timeout) cannot stretch a handshake past it. The dialing side of a {@link Handshake} reads
 * through one of these, with the deadline of its connect; once the handshake is done,
 * {@link #clearDeadline} leaves the socket's timeout to the connection's owner. Not thread-safe:
 * one reader at a time, as for any socket input.
 */
public final class DeadlineInputStream extends FilterInputStream {
    private final Socket socket;
    private long deadlineNanos;
    private boolean armed;

    /**
     * @param socket the connected socket, whose input this reads and whose timeout it sets
     * @throws IOException if the socket has no input
     */
    public DeadlineInputStream(Socket socket) throws IOException {
        super(socket.getInputStream());
        this.socket = socket;
    }

    /** Makes every later read end by {@code deadlineNanos} ({@link System#nanoTime()}). */
    public void setDeadline(long deadlineNanos) {
        this.deadlineNanos = deadlineNanos;
        this.armed = true;
    }

    /** Stops limiting reads; the socket's timeout stays as the last read set it until its owner sets another. */
    public void clearDeadline() {
        armed = false;
    }

    @Override
    public int read() throws IOException {
        waitAtMostTheTimeLeft();
        try {
            return super.read();
        } catch (SocketTimeoutException e) {
            throw late(e);
        }
    }

    @Override
    public int read(byte[] b, int off, int len) throws IOException {
        waitAtMostTheTimeLeft();
        try {
            return super.read(b, off, len);
        } catch (SocketTimeoutException e) {
            throw late(e);
        }
    }

    private void waitAtMostTheTimeLeft() throws IOException {
        if (!armed) {
            return;
        }
        long leftMillis = (deadlineNanos - System.nanoTime()) / 1_000_000;
        if (leftMillis <= 0) {
            throw late(null);
        }
        socket.setSoTimeout((int) Math.min(Integer.MAX_VALUE, leftMillis));
    }

    /** The timeout to throw: the deadline's if one is set, else {@code e} (the socket's own timeout). */
    private SocketTimeoutException late(SocketTimeoutException e) {
        if (!armed) {
            return e;
        }
        SocketTimeoutException t = new SocketTimeoutException("the handshake with " + socket.getRemoteSocketAddress()
                + " did not finish in time");
        if (e != null) {
            t.initCause(e);
        }
        return t;
    }
}
