package io.mcore4j.parallel.tcp;

import io.mcore4j.parallel.Backend;
import io.mcore4j.parallel.CommunicationException;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ProcessGroup;
import io.mcore4j.parallel.launch.LaunchedBackend;
import io.mcore4j.parallel.launch.LaunchEnvironment;
import io.mcore4j.parallel.rendezvous.JobToken;
import io.mcore4j.parallel.rendezvous.RendezvousStore;
import io.mcore4j.parallel.rendezvous.StoreTimeoutException;
import io.mcore4j.parallel.rendezvous.TcpStore;
import io.mcore4j.parallel.rendezvous.TcpStoreServer;

import java.net.InetAddress;
import java.nio.ByteOrder;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The multi-process backend: one process per rank, collectives over TCP (loopback on one machine,
 * the cluster network otherwise), started through a rendezvous store.
 *
 * <p>{@link #connect(LaunchEnvironment, Duration)} (or {@link #builder}) does, on every rank:
 * <ol>
 *   <li>rank 0 starts a {@link TcpStoreServer} at {@code MASTER_ADDR} and every rank connects a
 *       {@link TcpStore} to it (retrying until rank 0 is up), proving the {@link JobToken}; the port
 *       is {@code MASTER_PORT} unless torchrun's own store holds it (see {@link RendezvousStore#port});</li>
 *   <li>every rank listens on a free port, publishes {@code host:port} in the store and connects to
 *       every other rank, proving the token again (a full mesh: one connection per pair of ranks,
 *       shared by all groups; see {@link PeerMesh});</li>
 *   <li>a store barrier: no rank returns before every rank is connected.</li>
 * </ol>
 * The advertised host is the local address of the connection to the store (the interface that
 * routes to rank 0), unless {@link Builder#advertiseHost} says otherwise.
 *
 * <p>Failures: every blocking step has a timeout ({@link #DEFAULT_TIMEOUT} unless set). Connecting
 * fails with a {@link CommunicationException} for group {@code world}, operation {@code connect},
 * naming the ranks that did not show up. Afterwards, a peer whose process dies makes every call
 * waiting for it fail at once (its socket closes), and a stalled peer makes them fail at the
 * timeout, each naming the group, the operation and the missing ranks. Before a call fails at its
 * timeout it asks the ranks it waited for what they are waiting for, and follows the answers to
 * the rank that holds everyone up (see {@link WaitChain}; at most {@link PeerMesh#graceMillis} more),
 * so that a rank waiting for a live peer that itself waits for a stalled one blames the stalled
 * one ({@link CommunicationException#ranks()}) and says so. A backend closed after one
 * of its communicators failed does not wait for its peers' goodbyes (a stalled peer never sends
 * one) and tells every peer the failure and the ranks it blamed, so a peer that fails next because
 * this rank left names those ranks, the root cause, rather than this one.
 *
 * <p>The backend owns the sockets, threads, store connection (on rank 0 the store server too) and
 * every communicator it made; {@link #close()} releases them. The store stays usable
 * ({@link #store()}) until rank 0 closes its backend.
 */
public final class TcpBackend extends LaunchedBackend {
    /** Default timeout of every blocking call and of connecting. */
    public static final Duration DEFAULT_TIMEOUT = Duration.ofSeconds(60);

    /** Longest {@link #close()} waits for peers to close their side too. */
    private static final long CLOSE_WAIT_MS = 10_000;
    /** Longest {@link #close()} after a failure waits for its goodbyes to be written. */
    private static final long FAILED_CLOSE_SEND_MS = 1_000;
    private static final String CONNECTED_KEY = "mcore4j/connected/";
    private static final String ALL_CONNECTED_KEY = "mcore4j/all-connected";
    private static final Logger LOG = LoggerFactory.getLogger(TcpBackend.class);

    private final RendezvousStore rendezvous;
    private final PeerMesh mesh;
    private final Object failureLock = new Object();
    private volatile CommunicationException firstFailure;

    private TcpBackend(LaunchEnvironment env, Duration timeout, RendezvousStore rendezvous, PeerMesh mesh) {
        super(env, timeout, "TCP");
        this.rendezvous = rendezvous;
        this.mesh = mesh;
    }

    /**
     * Connects this process to the job described by {@code env}, with the job token from
     * {@link JobToken#fromEnvironment} over {@link System#getenv()}.
     *
     * @param env this process's launch environment
     * @param timeout timeout of connecting and of every later blocking call
     * @return the connected backend, which the caller owns and must close
     * @throws CommunicationException if some rank does not connect in time
     */
    public static TcpBackend connect(LaunchEnvironment env, Duration timeout) {
        return builder(env).timeout(timeout).connect();
    }

    /**
     * Options for connecting.
     *
     * @param env this process's launch environment
     * @return a builder
     */
    public static Builder builder(LaunchEnvironment env) {
        return new Builder(env);
    }

    /** Connection options; every one has a default. */
    public static final class Builder {
        private final LaunchEnvironment env;
        private Duration timeout = DEFAULT_TIMEOUT;
        private Duration connectTimeout;
        private JobToken token;
        private String advertiseHost;

        private Builder(LaunchEnvironment env) {
            this.env = Objects.requireNonNull(env, "env");
        }

        /**
         * @param timeout how long every blocking call waits for peers (default 60 s)
         * @return this
         */
        public Builder timeout(Duration timeout) {
            this.timeout = positive("timeout", timeout);
            return this;
        }

        /**
         * @param connectTimeout how long connecting waits for every rank to appear (default: the timeout)
         * @return this
         */
        public Builder connectTimeout(Duration connectTimeout) {
            this.connectTimeout = positive("connect timeout", connectTimeout);
            return this;
        }

        /**
         * @param token the job token (default {@link JobToken#fromEnvironment} over {@link System#getenv()})
         * @return this
         */
        public Builder jobToken(JobToken token) {
            this.token = Objects.requireNonNull(token, "token");
            return this;
        }

        /**
         * @param host the address other ranks use to reach this one (default: the local address
         *             of the connection to the store)
         * @return this
         */
        public Builder advertiseHost(String host) {
            this.advertiseHost = Objects.requireNonNull(host, "host");
            return this;
        }

        /**
         * Connects; blocks until every rank has joined. The store port comes from
         * {@link RendezvousStore#port} over {@link System#getenv()}.
         *
         * @return the connected backend, which the caller owns and must close
         * @throws CommunicationException if some rank does not connect in time
         */
        public TcpBackend connect() {
            return TcpBackend.open(env, RendezvousStore.port(env, System.getenv()), timeout,
                    connectTimeout == null ? timeout : connectTimeout,
                    token == null ? JobToken.fromEnvironment(System.getenv(), env) : token, advertiseHost);
        }

        private static Duration positive(String what, Duration d) {
            if (d.isNegative() || d.isZero()) {
                throw new IllegalArgumentException(what + " must be positive, got " + d);
            }
            return d;
        }
    }

    private static TcpBackend open(LaunchEnvironment env, int port, Duration timeout, Duration connectTimeout, JobToken token,
                                   String advertiseHost) {
        if (ByteOrder.nativeOrder() != ByteOrder.LITTLE_ENDIAN) {
            throw new UnsupportedOperationException("the TCP backend sends tensors little-endian and needs a little-endian machine");
        }
        long deadline = System.nanoTime() + connectTimeout.toNanos();
        long connectMillis = connectTimeout.toMillis();
        RendezvousStore rendezvous = RendezvousStore.connect(env, port, token, timeout, deadline,
                RendezvousStore.rankZeroHosts(System.getenv()));
        try {
            TcpStore store = rendezvous.client();
            InetAddress local = store.localAddress();
            String host = advertiseHost != null ? advertiseHost : local.getHostAddress();
            InetAddress bind = local.isLoopbackAddress() && advertiseHost == null ? local : RendezvousStore.wildcard();
            PeerMesh mesh = PeerMesh.establish(env.rank(), env.worldSize(), token, store, host, bind, deadline, connectMillis);
            try {
                awaitEveryone(env, store, deadline, connectMillis);
            } catch (RuntimeException e) {
                mesh.close(0);
                throw e;
            }
            LOG.debug("rank {} of {} connected (token {})", env.rank(), env.worldSize(), token.origin());
            return new TcpBackend(env, timeout, rendezvous, mesh);
        } catch (RuntimeException e) {
            throw rendezvous.closeAfter(e);
        }
    }

    /** Store barrier; the last rank to arrive sets the flag everyone waits for. */
    private static void awaitEveryone(LaunchEnvironment env, TcpStore store, long deadline, long connectMillis) {
        store.set(CONNECTED_KEY + env.rank(), new byte[] {1});
        if (store.add(CONNECTED_KEY + "count", 1) == env.worldSize()) {
            store.set(ALL_CONNECTED_KEY, new byte[] {1});
        }
        try {
            store.waitFor(List.of(ALL_CONNECTED_KEY), Duration.ofNanos(Math.max(1_000_000, deadline - System.nanoTime())));
        } catch (StoreTimeoutException e) {
            List<String> keys = new ArrayList<>();
            for (int r = 0; r < env.worldSize(); r++) {
                keys.add(CONNECTED_KEY + r);
            }
            List<Integer> missing = new ArrayList<>();
            try {
                store.waitFor(keys, Duration.ofMillis(1));
            } catch (StoreTimeoutException t) {
                for (String k : t.missingKeys()) {
                    missing.add(Integer.parseInt(k.substring(CONNECTED_KEY.length())));
                }
            }
            throw new CommunicationException("world", "connect", missing, "rank(s) " + missing
                    + " did not finish connecting within " + connectMillis + " ms", e);
        }
    }

    /**
     * The rendezvous store client of this rank, for job-wide metadata. Keys starting with
     * {@code mcore4j/} are reserved.
     *
     * @return the store, owned by this backend
     */
    public TcpStore store() {
        return rendezvous.client();
    }

    /**
     * A communicator over {@code group}. Calls for the same group on one backend give independent
     * communicators (each with its own message stream), matched across ranks by call order.
     *
     * @param group a group containing this rank at its {@code rank()} index
     * @return the communicator, owned by this backend
     * @throws IllegalArgumentException if the group does not place this rank at its index
     * @throws IllegalStateException if the backend is closed
     */
    @Override
    public synchronized Communicator communicator(ProcessGroup group) {
        int instance = nextInstance(group);
        return new TcpCommunicator(group, group.key() + "#" + instance, mesh, timeout(), this::recordFailure);
    }

    private void recordFailure(CommunicationException e) {
        synchronized (failureLock) {
            if (firstFailure == null) {
                firstFailure = e;
            }
        }
        // peers that time out waiting for this rank ask it why: it names the ranks it blamed
        mesh.inbox().failed(e);
    }

    /**
     * Says goodbye to every peer after what was already sent, waits (up to the timeout, at most
     * 10 s) for them to do the same, and releases sockets and threads; on rank 0 this also stops the
     * store. After a communicator of this backend failed, the goodbye carries that failure and
     * nothing waits for the peers. Later calls on this backend's communicators fail. Idempotent.
     */
    @Override
    public synchronized void close() {
        if (!markClosed()) {
            return;
        }
        CommunicationException failure = firstFailure;
        if (failure == null) {
            mesh.close(Math.min(timeout().toMillis(), CLOSE_WAIT_MS));
        } else {
            mesh.closeAfterFailure(failure.getMessage(), failure.ranks(), FAILED_CLOSE_SEND_MS);
        }
        rendezvous.close();
    }

    /** @return e.g. {@code TcpBackend[rank 1 of 4, store 127.0.0.1:29500]} */
    @Override
    public String toString() {
        return "TcpBackend[rank " + worldRank() + " of " + worldSize() + ", store " + rendezvous.client().address() + "]";
    }
}
