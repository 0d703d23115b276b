package io.mcore4j.parallel.rendezvous;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.SocketException;
import java.nio.charset.StandardCharsets;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Semaphore;
import java.util.concurrent.atomic.AtomicLong;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The rendezvous store's server: an in-memory key-value map that rank 0 hosts at
 * {@code MASTER_ADDR:MASTER_PORT} and every rank reaches through a {@link TcpStore}.
 *
 * <p>One daemon thread accepts connections and one daemon thread serves each client. A client must
 * first prove it holds the job's {@link JobToken} (and the server proves it back, see
 * {@link Handshake}); a connection that does not (wrong token, another protocol, a handshake not
 * finished within {@value #HANDSHAKE_TIMEOUT_MS} ms in all, however its bytes trickle in) is
 * answered with a rejection or closed, counted in {@link #rejectedConnections()} and logged at WARN
 * with its remote address (the first {@value #LOGGED_REJECTIONS} individually, then every
 * {@value #REJECTION_LOG_EVERY}th with the count). Blocking reads wait on the server with the
 * client's timeout, so a timed-out read leaves the connection usable.
 *
 * <p>Resources are bounded whatever clients send: at most {@value #MAX_HANDSHAKES} connections
 * are in their handshake at once, and one more evicts the oldest pending connection of the source
 * address with the most pending ones if that one has been pending for a second (see
 * {@link HandshakeSlots}), else it is closed at once and its client redials. So unauthenticated
 * connections cost at most that many threads, and slow or silent ones cannot keep a real client out
 * (its handshake takes milliseconds). At most {@value #MAX_CLIENTS} authenticated
 * clients are served, a wait names at most 10,000 keys, a value holds at most 64 MiB and all values
 * together at most
 * {@value #MAX_STORED_BYTES} bytes. A request beyond a bound fails that client with a message
 * naming the bound.
 *
 * <p>The server owns its socket, threads and data; {@link #close()} releases them and disconnects
 * every client. Values live until the server closes.
 */
public final class TcpStoreServer implements AutoCloseable {
    private static final Logger LOG = LoggerFactory.getLogger(TcpStoreServer.class);
    /** How long a connection may take to prove the token, from its acceptance to the end of its handshake. */
    public static final int HANDSHAKE_TIMEOUT_MS = 5_000;
    /** Most connections in their handshake at once; one more evicts one pending for a second or more, if any. */
    public static final int MAX_HANDSHAKES = 128;
    /** Most authenticated clients served at once. */
    public static final int MAX_CLIENTS = 4096;
    /** Most bytes all keys and values may hold together. */
    public static final long MAX_STORED_BYTES = 256L << 20;
    private static final int LOGGED_REJECTIONS = 10;
    private static final int REJECTION_LOG_EVERY = 100;

    private final ServerSocket server;
    private final JobToken token;
    private final SecureRandom random = new SecureRandom();
    private final Map<String, byte[]> values = new HashMap<>();
    private final Set<Socket> clients = ConcurrentHashMap.newKeySet();
    private final AtomicLong rejected = new AtomicLong();
    private final HandshakeSlots handshakes;
    private final Semaphore authenticated = new Semaphore(MAX_CLIENTS);
    private long storedBytes;
    private volatile boolean closed;

    private TcpStoreServer(ServerSocket server, JobToken token) {
        this.server = server;
        this.token = token;
        this.handshakes = new HandshakeSlots(MAX_HANDSHAKES, Duration.ofMillis(HANDSHAKE_TIMEOUT_MS),
                "the rendezvous store on port " + server.getLocalPort());
        Thread acceptor = new Thread(this::acceptLoop, "mcore4j-store-accept-" + server.getLocalPort());
        acceptor.setDaemon(true);
        acceptor.start();
    }

    /**
     * Starts a store listening on {@code bindAddress:port}.
     *
     * @param bindAddress local address to listen on (a wildcard address listens on every interface)
     * @param port the port, or 0 for any free port
     * @param token the job token clients must prove
     * @return the running server, which the caller owns and must close
     * @throws StoreException if the port cannot be bound
     */
    public static TcpStoreServer start(InetAddress bindAddress, int port, JobToken token) {
        try {
            ServerSocket s = new ServerSocket();
            s.setReuseAddress(true);
            try {
                s.bind(new InetSocketAddress(bindAddress, port), 128);
            } catch (IOException e) {
                s.close();
                throw e;
            }
            return new TcpStoreServer(s, token);
        } catch (IOException e) {
            throw new StoreException("cannot start the rendezvous store on " + bindAddress.getHostAddress() + ":" + port
                    + ": " + e.getMessage(), e);
        }
    }

    /** @return the port the store listens on */
    public int port() {
        return server.getLocalPort();
    }

    /** @return how many connections were rejected (wrong token or protocol, too slow, evicted, over a bound) so far */
    public long rejectedConnections() {
        return rejected.get();
    }

    /** Stops accepting, disconnects every client and wakes every blocked read (they fail). */
    @Override
    public void close() {
        closed = true;
        try {
            server.close();
        } catch (IOException e) {
            LOG.debug("closing the store's server socket", e);
        }
        handshakes.close();
        for (Socket c : clients) {
            closeQuietly(c);
        }
        synchronized (values) {
            values.notifyAll();
        }
    }

    private void acceptLoop() {
        while (!closed) {
            Socket client;
            try {
                client = server.accept();
            } catch (IOException e) {
                if (!closed) {
                    LOG.warn("rendezvous store on port {} stopped accepting: {}", port(), e.toString());
                }
                return;
            }
            HandshakeSlots.Slot slot = handshakes.admit(client);
            if (slot == null) {
                closeQuietly(client);
                reject(client, MAX_HANDSHAKES + " connections are already in their handshake, none for "
                        + HandshakeSlots.EVICTABLE_AFTER_MS + " ms yet");
                continue;
            }
            clients.add(client);
            Thread t = new Thread(() -> serve(client, slot), "mcore4j-store-client-" + client.getRemoteSocketAddress());
            t.setDaemon(true);
            t.start();
        }
    }

    private void reject(Socket client, String why) {
        long n = rejected.incrementAndGet();
        if (n <= LOGGED_REJECTIONS || n % REJECTION_LOG_EVERY == 0) {
            LOG.warn("rendezvous store on port {} rejected a connection from {}: {}{}", port(), client.getRemoteSocketAddress(),
                    why, n == LOGGED_REJECTIONS ? " (further rejections are logged every " + REJECTION_LOG_EVERY + "th)"
                            : n > LOGGED_REJECTIONS ? " (" + n + " rejected so far)" : "");
        }
    }

    private void serve(Socket client, HandshakeSlots.Slot slot) {
        boolean admitted = false;
        try (client) {
            client.setTcpNoDelay(true);
            client.setSoTimeout(HANDSHAKE_TIMEOUT_MS);
            DataInputStream in = new DataInputStream(new BufferedInputStream(client.getInputStream()));
            DataOutputStream out = new DataOutputStream(new BufferedOutputStream(client.getOutputStream()));
            try {
                Handshake.Hello hello = Handshake.challenge(in, out, token, Handshake.STORE, -1, -1, random);
                if (!slot.finish()) {
                    throw new IOException(slot.closedBecause());
                }
                if (!authenticated.tryAcquire()) {
                    Handshake.reject(out, "the store already serves " + MAX_CLIENTS + " clients");
                    throw new Handshake.RejectedException("the store already serves " + MAX_CLIENTS + " clients");
                }
                admitted = true;
                Handshake.accept(out, hello);
            } catch (IOException e) {
                slot.finish();
                reject(client, slot.closedBecause() != null ? slot.closedBecause() : e.getMessage());
                return;
            }
            client.setSoTimeout(0);
            serveRequests(in, out);
        } catch (SocketException | EOFException e) {
            LOG.debug("store client {} left: {}", client.getRemoteSocketAddress(), e.toString());
        } catch (IOException | RuntimeException e) {
            if (!closed) {
                LOG.warn("store client {} failed: {}", client.getRemoteSocketAddress(), e.toString());
            }
        } finally {
            slot.finish();
            if (admitted) {
                authenticated.release();
            }
            clients.remove(client);
        }
    }

    private void serveRequests(DataInputStream in, DataOutputStream out) throws IOException {
        while (!closed) {
            byte op;
            try {
                op = in.readByte();
            } catch (EOFException e) {
                return;
            }
            handle(op, in, out);
            out.flush();
        }
    }

    private void handle(byte op, DataInputStream in, DataOutputStream out) throws IOException {
        switch (op) {
            case StoreProtocol.SET -> {
                String key = in.readUTF();
                byte[] value = StoreProtocol.readBytes(in);
                synchronized (values) {
                    byte[] old = values.get(key);
                    long after = storedBytes - (old == null ? 0 : key.length() + old.length) + key.length() + value.length;
                    if (after > MAX_STORED_BYTES) {
                        out.writeByte(StoreProtocol.ERROR);
                        out.writeUTF("setting '" + key + "' (" + value.length + " bytes) would make the store hold more than "
                                + MAX_STORED_BYTES + " bytes");
                        return;
                    }
                    storedBytes = after;
                    values.put(key, value);
                    values.notifyAll();
                }
                out.writeByte(StoreProtocol.OK);
            }
            case StoreProtocol.GET -> {
                String key = in.readUTF();
                long timeoutMs = in.readLong();
                List<String> missing = await(List.of(key), timeoutMs);
                if (missing.isEmpty()) {
                    byte[] value;
                    synchronized (values) {
                        value = values.get(key);
                    }
                    out.writeByte(StoreProtocol.OK);
                    StoreProtocol.writeBytes(out, value);
                } else {
                    timedOut(out, missing);
                }
            }
            case StoreProtocol.ADD -> {
                String key = in.readUTF();
                long delta = in.readLong();
                long sum;
                synchronized (values) {
                    byte[] old = values.get(key);
                    long current = 0;
                    if (old != null) {
                        try {
                            current = Long.parseLong(new String(old, StandardCharsets.UTF_8));
                        } catch (NumberFormatException e) {
                            out.writeByte(StoreProtocol.ERROR);
                            out.writeUTF("key '" + key + "' holds a value that is not a decimal counter");
                            return;
                        }
                    }
                    sum = current + delta;
                    byte[] text = Long.toString(sum).getBytes(StandardCharsets.UTF_8);
                    storedBytes += (old == null ? key.length() : -old.length) + text.length;
                    values.put(key, text);
                    values.notifyAll();
                }
                out.writeByte(StoreProtocol.OK);
                out.writeLong(sum);
            }
            case StoreProtocol.WAIT -> {
                int n = in.readInt();
                if (n < 0 || n > StoreProtocol.MAX_KEYS_PER_WAIT) {
                    String problem = "a wait for " + n + " keys is outside [0, " + StoreProtocol.MAX_KEYS_PER_WAIT + "]";
                    out.writeByte(StoreProtocol.ERROR);
                    out.writeUTF(problem);
                    out.flush();
                    throw new IOException(problem); // the keys were not read: the connection cannot continue
                }
                List<String> keys = new ArrayList<>(n);
                for (int i = 0; i < n; i++) {
                    keys.add(in.readUTF());
                }
                long timeoutMs = in.readLong();
                List<String> missing = await(keys, timeoutMs);
                if (missing.isEmpty()) {
                    out.writeByte(StoreProtocol.OK);
                } else {
                    timedOut(out, missing);
                }
            }
            default -> throw new IOException("unknown store request " + op);
        }
    }

    /** Waits until every key is present; returns those still missing at the deadline. */
    private List<String> await(List<String> keys, long timeoutMs) throws IOException {
        long deadline = System.nanoTime() + Duration.ofMillis(Math.max(0, timeoutMs)).toNanos();
        synchronized (values) {
            while (true) {
                if (closed) {
                    throw new SocketException("store closed");
                }
                List<String> missing = new ArrayList<>();
                for (String k : keys) {
                    if (!values.containsKey(k)) {
                        missing.add(k);
                    }
                }
                long remaining = deadline - System.nanoTime();
                if (missing.isEmpty() || remaining <= 0) {
                    return missing;
                }
                try {
                    values.wait(Math.max(1, remaining / 1_000_000));
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    throw new IOException("interrupted", e);
                }
            }
        }
    }

    private static void timedOut(DataOutputStream out, List<String> missing) throws IOException {
        out.writeByte(StoreProtocol.TIMEOUT);
        out.writeInt(missing.size());
        for (String k : missing) {
            out.writeUTF(k);
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
