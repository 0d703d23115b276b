package io.mcore4j.parallel.rendezvous;

import io.mcore4j.parallel.CommunicationException;
import io.mcore4j.parallel.launch.LaunchEnvironment;

import java.net.InetAddress;
import java.net.UnknownHostException;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * One rank's connection to the rendezvous store of a job, which every multi-process backend (TCP,
 * NCCL) uses to find its peers: rank 0 hosts a {@link TcpStoreServer} at
 * {@code MASTER_ADDR:}{@link #port port}, and every rank, rank 0 included, connects a
 * {@link TcpStore} client to it, proving the {@link JobToken}.
 *
 * <p>A job whose ranks all run on this machine uses the loopback address whatever
 * {@code MASTER_ADDR} says ({@link #storeHost}), so it stays off the network. Otherwise the server
 * listens on {@code MASTER_ADDR} itself when that is a loopback address, else on every interface,
 * which a job with a derived {@link JobToken} refuses without an explicit opt-in. Failures to connect are
 * {@link CommunicationException}s for group {@code world}, operation {@code connect}, naming rank 0.
 *
 * <p>Owns the client and, on rank 0, the server; {@link #close()} releases both (the client first).
 * Other ranks' clients fail once rank 0 has closed its store.
 */
public final class RendezvousStore implements AutoCloseable {
    /** Variable naming the store port explicitly (wins over {@code MASTER_PORT}). */
    public static final String PORT_VAR = "MCORE4J_STORE_PORT";

    /**
     * Set to {@code 1} (or {@code true}) by a launcher that itself serves the mcore4j rendezvous store
     * at {@code MASTER_ADDR:}{@link #port port} (e.g. {@code LocalLauncher}, which binds the port
     * before any rank starts, so no other process can take it in between): rank 0 then connects as a
     * client like every other rank and starts no server.
     */
    public static final String EXTERNAL_STORE_VAR = "MCORE4J_STORE_EXTERNAL";

    /** torchrun sets this to {@code True} when its agent serves its own store at {@code MASTER_PORT}. */
    public static final String AGENT_STORE_VAR = "TORCHELASTIC_USE_AGENT_STORE";

    private final int rank;
    private final TcpStoreServer server;
    private final TcpStore client;

    private RendezvousStore(int rank, TcpStoreServer server, TcpStore client) {
        this.rank = rank;
        this.server = server;
        this.client = client;
    }

    /**
     * The port of the rendezvous store: {@value #PORT_VAR} if set; else {@code MASTER_PORT + 1}
     * when torchrun's agent already serves its own store at {@code MASTER_PORT}
     * ({@value #AGENT_STORE_VAR}{@code =True}, the default of recent torchrun versions); else
     * {@code MASTER_PORT}. Every rank sees the same variables, so every rank picks the same port.
     *
     * @param env the launch environment
     * @param vars environment variables (e.g. {@link System#getenv()})
     * @return the port every rank uses
     * @throws IllegalArgumentException if {@value #PORT_VAR} is not a port number, or torchrun's store
     *         holds port 65535 and {@value #PORT_VAR} is not set
     */
    public static int port(LaunchEnvironment env, Map<String, String> vars) {
        String explicit = vars.get(PORT_VAR);
        if (explicit != null && !explicit.isBlank()) {
            int port;
            try {
                port = Integer.parseInt(explicit.trim());
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException(PORT_VAR + "=" + explicit + " is not a port number", e);
            }
            if (port < 1 || port > 65535) {
                throw new IllegalArgumentException(PORT_VAR + "=" + explicit + " is outside [1, 65535]");
            }
            return port;
        }
        if ("true".equalsIgnoreCase(vars.getOrDefault(AGENT_STORE_VAR, "").trim())) {
            if (env.masterPort() == 65535) {
                throw new IllegalArgumentException("torchrun's store holds MASTER_PORT 65535 and there is no next port; set "
                        + PORT_VAR);
            }
            return env.masterPort() + 1;
        }
        return env.masterPort();
    }

    /**
     * Whether rank 0 must start the store: false when a launcher serves it ({@value #EXTERNAL_STORE_VAR}).
     *
     * @param vars environment variables (e.g. {@link System#getenv()})
     * @return true unless {@value #EXTERNAL_STORE_VAR} is {@code 1} or {@code true}
     */
    public static boolean rankZeroHosts(Map<String, String> vars) {
        String external = vars.getOrDefault(EXTERNAL_STORE_VAR, "").trim();
        return !(external.equals("1") || external.equalsIgnoreCase("true"));
    }

    /**
     * Connects this rank to the store, starting it first on rank 0 (unless a launcher serves it, see
     * {@link #rankZeroHosts} over {@link System#getenv()}); the other ranks retry until the store is
     * up or {@code timeout} has passed.
     *
     * @param env this process's launch environment (rank and {@code MASTER_ADDR})
     * @param port the store's port, see {@link #port}
     * @param token the job token to prove
     * @param timeout how long to wait for the store, and the default timeout of the client's blocking calls
     * @return the connection, which the caller owns and must close
     * @throws CommunicationException if {@code MASTER_ADDR} does not resolve, rank 0 cannot start the
     *         store, or the store stays unreachable, refuses the token or does not prove it
     * @throws IllegalStateException if rank 0 would listen on a non-loopback address with a derived
     *         token ({@link JobToken#checkMayListen})
     */
    public static RendezvousStore connect(LaunchEnvironment env, int port, JobToken token, Duration timeout) {
        return connect(env, port, token, timeout, System.nanoTime() + timeout.toNanos(), rankZeroHosts(System.getenv()));
    }

    /**
     * {@link #connect(LaunchEnvironment, int, JobToken, Duration)}, waiting for the store until
     * {@code deadlineNanos}.
     *
     * @param env this process's launch environment (rank and {@code MASTER_ADDR})
     * @param port the store's port, see {@link #port}
     * @param token the job token to prove
     * @param timeout the default timeout of the client's blocking calls
     * @param deadlineNanos {@link System#nanoTime()} until which to wait for the store
     * @param rankZeroHosts whether rank 0 starts the store ({@link #rankZeroHosts(Map)})
     * @return the connection, which the caller owns and must close
     * @throws CommunicationException as for {@link #connect(LaunchEnvironment, int, JobToken, Duration)}
     */
    public static RendezvousStore connect(LaunchEnvironment env, int port, JobToken token, Duration timeout, long deadlineNanos,
                                          boolean rankZeroHosts) {
        Objects.requireNonNull(token, "token");
        String host = storeHost(env);
        InetAddress master = resolve(host);
        TcpStoreServer server = null;
        try {
            if (env.rank() == 0 && rankZeroHosts) {
                InetAddress bind = master.isLoopbackAddress() ? master : wildcard();
                token.checkMayListen(bind, "rank 0's rendezvous store");
                server = TcpStoreServer.start(bind, port, token);
            }
            TcpStore client;
            try {
                client = TcpStore.connect(host, port, token, env.rank(), timeout, deadlineNanos);
            } catch (StoreException e) {
                throw new CommunicationException("world", "connect", List.of(0), "rank " + env.rank()
                        + " could not reach rank 0's store at " + host + ":" + port + ": " + e.getMessage(), e);
            }
            return new RendezvousStore(env.rank(), server, client);
        } catch (RuntimeException e) {
            if (server != null) {
                server.close();
            }
            throw failure(env.rank(), e);
        }
    }

    /**
     * Where the store is reached: the loopback address when every rank of the job runs on this
     * machine ({@code LOCAL_WORLD_SIZE == WORLD_SIZE}), whatever {@code MASTER_ADDR} says (torchrun
     * sets it to the host's name), so a single-machine job never listens on the network; else
     * {@code MASTER_ADDR}.
     *
     * @param env the launch environment
     * @return the store's host
     */
    public static String storeHost(LaunchEnvironment env) {
        return env.localWorldSize() == env.worldSize() ? InetAddress.getLoopbackAddress().getHostAddress() : env.masterAddr();
    }

    /** @return the client of this rank, owned by this connection; keys are shared by the whole job */
    public TcpStore client() {
        return client;
    }

    /** @return true on rank 0, which hosts the store server and so must close last */
    public boolean hostsServer() {
        return server != null;
    }

    /**
     * For a backend whose connecting failed after the store was reached: closes this connection and
     * says what to throw.
     *
     * @param e the failure
     * @return {@code e}, or for a {@link StoreException} a {@link CommunicationException} saying that
     *         rank 0's store failed
     */
    public RuntimeException closeAfter(RuntimeException e) {
        close();
        return failure(rank, e);
    }

    /** Closes the client, then (on rank 0) the server, which disconnects every other rank's client. Idempotent. */
    @Override
    public void close() {
        client.close();
        if (server != null) {
            server.close();
        }
    }

    /** @return e.g. {@code RendezvousStore[rank 0 of 127.0.0.1:29500, hosting]} */
    @Override
    public String toString() {
        return "RendezvousStore[rank " + rank + " of " + client.address() + (server != null ? ", hosting" : "") + "]";
    }

    /** @return the wildcard IPv4 address, to listen on every interface */
    public static InetAddress wildcard() {
        try {
            return InetAddress.getByAddress(new byte[4]);
        } catch (UnknownHostException e) {
            throw new IllegalStateException(e);
        }
    }

    private static RuntimeException failure(int rank, RuntimeException e) {
        if (e instanceof StoreException) {
            return new CommunicationException("world", "connect", List.of(0), "rank " + rank
                    + ": the rendezvous store of rank 0 failed: " + e.getMessage(), e);
        }
        return e;
    }

    private static InetAddress resolve(String host) {
        try {
            return InetAddress.getByName(host);
        } catch (UnknownHostException e) {
            throw new CommunicationException("world", "connect", List.of(0), "MASTER_ADDR " + host + " does not resolve", e);
        }
    }
}
