package io.mcore4j.parallel.nccl;

import ai.djl.Device;
import ai.djl.ndarray.NDManager;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.parallel.Backend;
import io.mcore4j.parallel.CommunicationException;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ProcessGroup;
import io.mcore4j.parallel.launch.LaunchedBackend;
import io.mcore4j.parallel.launch.LaunchEnvironment;
import io.mcore4j.parallel.rendezvous.JobToken;
import io.mcore4j.parallel.rendezvous.RendezvousStore;
import io.mcore4j.parallel.rendezvous.StoreException;
import io.mcore4j.parallel.rendezvous.TcpStore;
import io.mcore4j.parallel.rendezvous.TcpStoreServer;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The GPU backend: one process per CUDA device, collectives with NCCL on DJL CUDA tensors.
 *
 * <p>{@link #connect(LaunchEnvironment, Duration)} (or {@link #builder}) does, on every rank:
 * <ol>
 *   <li>selects CUDA device {@code LOCAL_RANK} for the calling thread ({@code cudaSetDevice});</li>
 *   <li>rank 0 starts a {@link TcpStoreServer} (the TCP backend's rendezvous store) and every rank
 *       connects a {@link TcpStore} to it, proving the {@link JobToken} (see {@link RendezvousStore#port}
 *       for the port);</li>
 *   <li>creates the world communicator: rank 0 makes an NCCL unique id and publishes it under
 *       {@code nccl/world}, the others read it, and all call {@code ncclCommInitRank}.</li>
 * </ol>
 * {@link #communicator(ProcessGroup)} creates one NCCL communicator per call the same way, with the
 * id published by the group's rank 0 under {@code nccl/<group key>} ({@code nccl/<group key>#n} for
 * the n-th repeat of the same group); every member must call it, in the same order as the other
 * members (as {@link io.mcore4j.parallel.ProcessGroups} does). A group of one member gets no NCCL
 * communicator (its collectives are local copies). Communicators are made with
 * {@code ncclCommInitRank} only: {@code ncclCommSplit} and other functions newer than the host's
 * NCCL would abort the JVM.
 *
 * <p>Communicators, beyond the {@link Communicator} contract:
 * <ul>
 *   <li>Tensors must be on {@link #device()}; create managers there
 *       ({@code NDManager.newBaseManager(backend.device())}). Dtypes: float32, float16, float64,
 *       int32, int64, int8, uint8. Non-contiguous inputs are copied first.</li>
 *   <li>NCCL runs on the legacy default stream, the one DJL's libtorch ops use: it starts after the
 *       ops enqueued before the call and finishes before those enqueued after it. Collectives return
 *       once enqueued, without a host wait (results are complete in stream order, for every later op
 *       and host read); a watchdog thread per backend polls that work. Send, receive, barrier and
 *       all-gather-bytes wait on the host until their work has finished.</li>
 *   <li>Sums are NCCL's (ring or tree order), not rank order, so floating results may differ from the
 *       CPU backends' in the last bits; every member gets the same result. AVG is {@code ncclAvg}
 *       (integers truncate toward zero).</li>
 *   <li>A send returns once the peer has received the data: order sends and receives so that each
 *       send meets its receive (the pipeline schedules do).</li>
 *   <li>NCCL cannot detect members that pass different operations, shapes or all-to-all splits: such
 *       calls corrupt data or stall until the timeout.</li>
 *   <li>Transfers over the chunk size ({@link Builder#chunkBytes}) are split into several NCCL calls;
 *       tensors of 2 GiB and more work.</li>
 * </ul>
 *
 * <p>Failures: a rank that does not reach the creation of a communicator makes the others fail at
 * the timeout with a {@link CommunicationException} naming it; afterwards a stalled or dead peer gets
 * the communicator aborted at the timeout (by the watchdog, or by the call waiting on the host) and
 * every member's next call on it fails with an exception naming the group and the operation that
 * did not complete (NCCL cannot say which peer is missing). Host reads of a result stalled behind
 * such work return once the abort has stopped it; the next NCCL call then fails.
 *
 * <p>The backend owns the store connection (on rank 0 the store server too), every communicator it
 * made, and a device manager for its own temporaries; {@link #close()} releases them. Loading this
 * class loads no CUDA library; {@link #connect} does.
 */
public final class NcclBackend extends LaunchedBackend {
    /** Default timeout of every blocking call and of connecting. */
    public static final Duration DEFAULT_TIMEOUT = Duration.ofSeconds(60);
    /** Default largest transfer per NCCL call (1 GiB). */
    public static final long DEFAULT_CHUNK_BYTES = 1L << 30;

    private static final String WORLD_KEY = "nccl/world";
    private static final String CLOSING_KEY = "nccl/closing";
    private static final long CLOSE_WAIT_MS = 10_000;
    private static final Logger LOG = LoggerFactory.getLogger(NcclBackend.class);

    private final long chunkBytes;
    private final Device device;
    private final RendezvousStore rendezvous;
    private final TcpStore store;
    private final NDManager manager;
    private final String ncclVersion;
    private final List<NcclCommunicator> communicators = new ArrayList<>();
    private final NcclWatchdog watchdog;
    private final Communicator world;

    private NcclBackend(LaunchEnvironment env, Duration timeout, long chunkBytes, RendezvousStore rendezvous,
                        NDManager manager, String ncclVersion) {
        super(env, timeout, "NCCL");
        this.chunkBytes = chunkBytes;
        this.device = Device.gpu(env.localRank());
        this.rendezvous = rendezvous;
        this.store = rendezvous.client();
        this.manager = manager;
        this.ncclVersion = ncclVersion;
        this.watchdog = new NcclWatchdog(env.localRank(), "nccl-watchdog-rank" + env.rank());
        int[] all = new int[env.worldSize()];
        for (int r = 0; r < all.length; r++) {
            all[r] = r;
        }
        try {
            this.world = create(ProcessGroup.of("world", all, env.rank()), WORLD_KEY, chunkBytes);
        } catch (RuntimeException e) {
            watchdog.close();
            throw e;
        }
    }

    /**
     * Connects this process to the job described by {@code env}, with the job token from
     * {@link JobToken#fromEnvironment} over {@link System#getenv()}.
     *
     * @param env this process's launch environment; {@code localRank} selects the CUDA device
     * @param timeout timeout of connecting and of every later blocking call
     * @return the connected backend, which the caller owns and must close
     * @throws CommunicationException if some rank does not connect in time or NCCL fails
     * @throws IllegalStateException if CUDA or NCCL cannot be loaded or the CUDA device does not exist
     */
    public static NcclBackend connect(LaunchEnvironment env, Duration timeout) {
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
        private JobToken token;
        private long chunkBytes = DEFAULT_CHUNK_BYTES;

        private Builder(LaunchEnvironment env) {
            this.env = Objects.requireNonNull(env, "env");
        }

        /**
         * @param timeout how long connecting and every blocking call wait for peers (default 60 s)
         * @return this
         */
        public Builder timeout(Duration timeout) {
            if (timeout.isNegative() || timeout.isZero()) {
                throw new IllegalArgumentException("timeout must be positive, got " + timeout);
            }
            this.timeout = timeout;
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
         * @param chunkBytes largest transfer per NCCL call (default {@value NcclBackend#DEFAULT_CHUNK_BYTES});
         *                   larger transfers are split
         * @return this
         */
        public Builder chunkBytes(long chunkBytes) {
            if (chunkBytes < 1) {
                throw new IllegalArgumentException("chunk size must be at least one byte, got " + chunkBytes);
            }
            this.chunkBytes = chunkBytes;
            return this;
        }

        /**
         * Connects; blocks until every rank has joined the world communicator. The store port comes
         * from {@link RendezvousStore#port} over {@link System#getenv()}.
         *
         * @return the connected backend, which the caller owns and must close
         * @throws CommunicationException if some rank does not connect in time or NCCL fails
         */
        public NcclBackend connect() {
            return open(env, timeout, chunkBytes, token == null ? JobToken.fromEnvironment(System.getenv(), env) : token,
                    RendezvousStore.port(env, System.getenv()));
        }
    }

    private static NcclBackend open(LaunchEnvironment env, Duration timeout, long chunkBytes, JobToken token, int port) {
        Mcore4j.ensureInitialized();
        String version;
        try {
            NcclComm.selectDevice(env.localRank());
            version = NcclComm.version();
        } catch (LinkageError e) {
            throw new IllegalStateException("the NCCL backend needs a CUDA driver (libcuda.so.1), libcudart.so.13 and "
                    + "libnccl.so.2, loaded through JavaCPP's CUDA preset: " + e.getMessage(), e);
        }
        if (System.getenv("NCCL_NVLS_ENABLE") == null) {
            LOG.warn("NCCL_NVLS_ENABLE is not set; the GPU hosts need NCCL_NVLS_ENABLE=0 (NVLink multicast off)");
        }
        RendezvousStore rendezvous = RendezvousStore.connect(env, port, token, timeout);
        NDManager manager = null;
        try {
            manager = NDManager.newBaseManager(Device.gpu(env.localRank()));
            NcclBackend backend = new NcclBackend(env, timeout, chunkBytes, rendezvous, manager, version);
            LOG.debug("rank {} of {} on {} connected (NCCL {}, store port {})", env.rank(), env.worldSize(),
                    backend.device, version, port);
            return backend;
        } catch (RuntimeException e) {
            if (manager != null) {
                manager.close();
            }
            throw rendezvous.closeAfter(e);
        }
    }

    /** @return the CUDA device index of this process (its {@code LOCAL_RANK}) */
    public int deviceIndex() {
        return environment().localRank();
    }

    /** @return the DJL device every tensor given to this backend's communicators must be on */
    public Device device() {
        return device;
    }

    /** @return the NCCL library version in use, e.g. {@code 2.28.3} */
    public String ncclVersion() {
        return ncclVersion;
    }

    /**
     * The communicator over every rank, created when connecting (group {@code world}).
     *
     * @return the communicator, owned by this backend
     */
    public Communicator world() {
        return world;
    }

    /**
     * The rendezvous store client of this rank, for job-wide metadata. Keys starting with
     * {@code nccl/} are reserved.
     *
     * @return the store, owned by this backend
     */
    public TcpStore store() {
        return store;
    }

    /**
     * A new NCCL communicator over {@code group}. Collective: every member calls it, in the same
     * order relative to its other calls; it returns once every member has joined.
     *
     * @param group a group containing this rank at its {@code rank()} index
     * @return the communicator, owned by this backend
     * @throws IllegalArgumentException if the group does not place this rank at its index
     * @throws IllegalStateException if the backend is closed
     * @throws CommunicationException if some member does not join in time or NCCL fails
     */
    @Override
    public synchronized Communicator communicator(ProcessGroup group) {
        return communicator(group, chunkBytes);
    }

    /** {@link #communicator(ProcessGroup)} with its own chunk size (the GPU check uses tiny chunks). */
    synchronized Communicator communicator(ProcessGroup group, long groupChunkBytes) {
        int instance = nextInstance(group);
        return create(group, "nccl/" + group.key() + (instance == 0 ? "" : "#" + instance), groupChunkBytes);
    }

    private NcclCommunicator create(ProcessGroup group, String key, long groupChunkBytes) {
        NcclComm comm = null;
        if (group.size() > 1) {
            UniqueId id = CommIdExchange.exchange(store, key, group, NcclComm::newUniqueId, timeout());
            comm = NcclComm.init(group, id, deviceIndex(), timeout());
            watchdog.watch(comm);
        }
        NcclCommunicator c = new NcclCommunicator(group, comm, device, timeout(), groupChunkBytes, manager.newSubManager(device));
        communicators.add(c);
        return c;
    }

    /**
     * Destroys every communicator (newest first, the same order on every rank), then releases the
     * store; rank 0 keeps its store server up until every rank has started closing (at most 10 s).
     * Idempotent.
     */
    @Override
    public synchronized void close() {
        if (!markClosed()) {
            return;
        }
        watchdog.close();
        RuntimeException failure = null;
        for (int i = communicators.size() - 1; i >= 0; i--) {
            try {
                communicators.get(i).close();
            } catch (RuntimeException e) {
                failure = failure == null ? e : failure;
            }
        }
        manager.close();
        try {
            store.add(CLOSING_KEY, 1);
            if (rendezvous.hostsServer()) {
                long deadline = System.nanoTime() + Math.min(timeout().toMillis(), CLOSE_WAIT_MS) * 1_000_000;
                while (store.add(CLOSING_KEY, 0) < worldSize() && System.nanoTime() < deadline) {
                    Thread.sleep(10);
                }
            }
        } catch (StoreException e) {
            LOG.debug("rank {}: the store failed while closing: {}", worldRank(), e.getMessage());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        rendezvous.close();
        if (failure != null) {
            throw failure;
        }
    }

    /** @return e.g. {@code NcclBackend[rank 1 of 4, gpu(1), NCCL 2.28.3, store 127.0.0.1:29501]} */
    @Override
    public String toString() {
        return "NcclBackend[rank " + worldRank() + " of " + worldSize() + ", " + device + ", NCCL " + ncclVersion
                + ", store " + store.address() + "]";
    }
}
