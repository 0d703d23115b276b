package io.mcore4j.parallel.rendezvous;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;

/**
 * A client of the rendezvous store ({@link TcpStoreServer}), with torch's TCPStore operations:
 * {@link #set}, blocking {@link #get}, atomic {@link #add} and {@link #waitFor}.
 *
 * <p>Blocking calls take a timeout (default: the one given to {@link #connect}); the server waits on
 * the client's behalf and answers at the deadline, so a {@link StoreTimeoutException} leaves the
 * connection usable. Any other failure ({@link StoreException}: store gone, protocol error) closes
 * the client for good. Calls are serialised on one connection; the client is thread-safe. It owns
 * its socket until {@link #close()}.
 */
public final class TcpStore implements AutoCloseable {
    /** Extra time the client allows beyond a blocking call's timeout for the server's answer to arrive. */
    private static final long ANSWER_GRACE_MS = 10_000;

    private final String address;
    private final Socket socket;
    private final DataInputStream in;
    private final DataOutputStream out;
    private final Duration timeout;
    private StoreException broken;

    private TcpStore(String address, Socket socket, DeadlineInputStream input, Duration timeout) throws IOException {
        this.address = address;
        this.socket = socket;
        this.in = new DataInputStream(new BufferedInputStream(input));
        this.out = new DataOutputStream(new BufferedOutputStream(socket.getOutputStream()));
        this.timeout = timeout;
    }

    /**
     * Connects to the store at {@code host:port}, retrying until {@code timeout} while it is not yet
     * listening (rank 0 may start after the others).
     *
     * @param host the store's host
     * @param port the store's port
     * @param token the job token to prove
     * @param timeout how long to keep trying, and the default timeout of blocking calls
     * @return the connected client, which the caller owns and must close
     * @throws StoreException if the store stays unreachable (a handshake not finished by the deadline
     *         counts as unreachable), rejects the token, or does not prove
     *         that it knows the token itself
     */
    public static TcpStore connect(String host, int port, JobToken token, Duration timeout) {
        return connect(host, port, token, -1, timeout, System.nanoTime() + timeout.toNanos());
    }

    static TcpStore connect(String host, int port, JobToken token, int rank, Duration timeout, long deadlineNanos) {
        Objects.requireNonNull(token, "token");
        String address = host + ":" + port;
        IOException last = null;
        long backoffMs = 20;
        while (true) {
            long remainingMs = (deadlineNanos - System.nanoTime()) / 1_000_000;
            if (remainingMs <= 0) {
                throw new StoreException("the rendezvous store at " + address + " was not reachable within "
                        + timeout.toMillis() + " ms" + (last == null ? "" : ": " + last), last);
            }
            Socket s = new Socket();
            try {
                s.setTcpNoDelay(true);
                s.connect(new InetSocketAddress(host, port), (int) Math.min(remainingMs, 5_000));
                // the whole handshake, however the server trickles its bytes, ends by then
                DeadlineInputStream input = new DeadlineInputStream(s);
                input.setDeadline(System.nanoTime() + Math.min(Math.max(remainingMs, 1_000), 30_000) * 1_000_000);
                TcpStore store = new TcpStore(address, s, input, timeout);
                Handshake.respond(store.in, store.out, token, Handshake.STORE, rank, -1, -1, new SecureRandom());
                input.clearDeadline();
                s.setSoTimeout(0);
                return store;
            } catch (Handshake.RejectedException e) {
                closeQuietly(s);
                throw new StoreException("the rendezvous store at " + address + " refused this client: " + e.getMessage(), e);
            } catch (IOException e) {
                closeQuietly(s);
                last = e;
            }
            try {
                Thread.sleep(Math.min(backoffMs, Math.max(1, remainingMs)));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new StoreException("interrupted while connecting to the store at " + address, e);
            }
            backoffMs = Math.min(backoffMs * 2, 500);
        }
    }

    /** @return {@code host:port} of the store */
    public String address() {
        return address;
    }

    /** @return the default timeout of blocking calls */
    public Duration timeout() {
        return timeout;
    }

    /** @return this end's local address, which is the interface that routes to the store */
    public InetAddress localAddress() {
        return socket.getLocalAddress();
    }

    /**
     * Sets {@code key} to {@code value}, waking readers waiting for it.
     *
     * @param key the key
     * @param value the value (copied)
     */
    public synchronized void set(String key, byte[] value) {
        call("set '" + key + "'", 0, () -> {
            out.writeByte(StoreProtocol.SET);
            out.writeUTF(key);
            StoreProtocol.writeBytes(out, value);
        });
        expectOk("set '" + key + "'");
    }

    /**
     * The value of {@code key}, waiting for it to be set for at most {@link #timeout()}.
     *
     * @param key the key
     * @return its value
     * @throws StoreTimeoutException if the key is not set in time
     */
    public byte[] get(String key) {
        return get(key, timeout);
    }

    /**
     * The value of {@code key}, waiting for it to be set for at most {@code wait}.
     *
     * @param key the key
     * @param wait how long to wait
     * @return its value
     * @throws StoreTimeoutException if the key is not set in time
     */
    public synchronized byte[] get(String key, Duration wait) {
        String what = "get '" + key + "'";
        call(what, wait.toMillis(), () -> {
            out.writeByte(StoreProtocol.GET);
            out.writeUTF(key);
            out.writeLong(wait.toMillis());
        });
        return read(what, wait.toMillis(), () -> {
            byte status = in.readByte();
            if (status == StoreProtocol.OK) {
                return StoreProtocol.readBytes(in);
            }
            throw failure(what, wait, status);
        });
    }

    /**
     * Atomically adds {@code delta} to the decimal counter at {@code key} (absent counts as 0).
     *
     * @param key the key
     * @param delta the increment
     * @return the new value
     */
    public synchronized long add(String key, long delta) {
        String what = "add to '" + key + "'";
        call(what, 0, () -> {
            out.writeByte(StoreProtocol.ADD);
            out.writeUTF(key);
            out.writeLong(delta);
        });
        return read(what, 0, () -> {
            byte status = in.readByte();
            if (status == StoreProtocol.OK) {
                return in.readLong();
            }
            throw failure(what, Duration.ZERO, status);
        });
    }

    /**
     * Waits until every key is set, for at most {@link #timeout()}.
     *
     * @param keys the keys
     * @throws StoreTimeoutException naming the keys still missing
     */
    public void waitFor(List<String> keys) {
        waitFor(keys, timeout);
    }

    /**
     * Waits until every key is set, for at most {@code wait}.
     *
     * @param keys the keys
     * @param wait how long to wait
     * @throws StoreTimeoutException naming the keys still missing
     * @throws IllegalArgumentException for more than 10,000 keys
     */
    public synchronized void waitFor(List<String> keys, Duration wait) {
        if (keys.size() > StoreProtocol.MAX_KEYS_PER_WAIT) {
            throw new IllegalArgumentException("a wait names at most " + StoreProtocol.MAX_KEYS_PER_WAIT + " keys, got " + keys.size());
        }
        String what = "wait for " + keys.size() + " key(s)";
        call(what, wait.toMillis(), () -> {
            out.writeByte(StoreProtocol.WAIT);
            out.writeInt(keys.size());
            for (String k : keys) {
                out.writeUTF(k);
            }
            out.writeLong(wait.toMillis());
        });
        read(what, wait.toMillis(), () -> {
            byte status = in.readByte();
            if (status != StoreProtocol.OK) {
                throw failure(what, wait, status);
            }
            return null;
        });
    }

    /** Disconnects. Idempotent. */
    @Override
    public synchronized void close() {
        if (broken == null) {
            broken = new StoreException("the store client for " + address + " is closed", null);
        }
        closeQuietly(socket);
    }

    private interface Request {
        void write() throws IOException;
    }

    private interface Reply<T> {
        T read() throws IOException;
    }

    private void call(String what, long waitMs, Request request) {
        if (broken != null) {
            throw new StoreException("cannot " + what + " on the store at " + address + ": " + broken.getMessage(), broken);
        }
        try {
            socket.setSoTimeout((int) Math.min(Integer.MAX_VALUE, waitMs + ANSWER_GRACE_MS));
            request.write();
            out.flush();
        } catch (IOException e) {
            throw fail(what, e);
        }
    }

    private <T> T read(String what, long waitMs, Reply<T> reply) {
        try {
            return reply.read();
        } catch (SocketTimeoutException e) {
            throw fail(what, new IOException("no answer within " + (waitMs + ANSWER_GRACE_MS) + " ms", e));
        } catch (IOException e) {
            throw fail(what, e);
        }
    }

    private void expectOk(String what) {
        read(what, 0, () -> {
            byte status = in.readByte();
            if (status != StoreProtocol.OK) {
                throw failure(what, Duration.ZERO, status);
            }
            return null;
        });
    }

    /** Reads the rest of a non-OK reply and builds the exception to throw (leaving the connection usable). */
    private StoreException failure(String what, Duration wait, byte status) throws IOException {
        if (status == StoreProtocol.TIMEOUT) {
            int n = in.readInt();
            List<String> missing = new ArrayList<>(n);
            for (int i = 0; i < n; i++) {
                missing.add(in.readUTF());
            }
            return new StoreTimeoutException("store at " + address + ": " + what + " timed out after " + wait.toMillis()
                    + " ms; still missing: " + missing, missing);
        }
        if (status == StoreProtocol.ERROR) {
            return new StoreException("store at " + address + ": " + what + " failed: " + in.readUTF(), null);
        }
        throw new IOException("unknown reply status " + status);
    }

    private StoreException fail(String what, IOException e) {
        broken = new StoreException("store at " + address + ": " + what + " failed: " + e.getMessage(), e);
        closeQuietly(socket);
        return broken;
    }

    private static void closeQuietly(Socket s) {
        try {
            s.close();
        } catch (IOException e) {
            // already broken: nothing to release
        }
    }
}
