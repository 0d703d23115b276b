package io.mcore4j.parallel.tcp;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.core.Mcore4j;
import io.mcore4j.parallel.launch.LaunchEnvironment;
import io.mcore4j.parallel.CommunicationException;
import io.mcore4j.parallel.ProcessGroup;
import io.mcore4j.parallel.rendezvous.Handshake;
import io.mcore4j.parallel.rendezvous.JobToken;
import io.mcore4j.parallel.rendezvous.SlowClients;
import io.mcore4j.parallel.rendezvous.TcpStore;
import io.mcore4j.parallel.rendezvous.TcpStoreServer;
import io.mcore4j.parallel.rendezvous.TricklingServer;

import java.net.InetAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.stream.IntStream;

import org.junit.jupiter.api.Test;

/**
 * Reliability (issue 22, item 6): silent connections to a rank's peer port do not delay the real
 * peers' handshakes (they used to be served one at a time, 10 s each). Issue 40, item 6:
 * connections trickling their handshake in (slowloris), as many as there are handshake slots and
 * more, on the store or on a rank's peer port, from the real ranks' own address, do not keep the
 * job from starting. Loopback only.
 */
class StartupReliabilityTest {

    @Test
    void silentConnectionsToThePeerPortDoNotDelayTheJob() throws Exception {
        Mcore4j.ensureInitialized();
        JobToken token = JobToken.of("startup-" + System.nanoTime());
        int port = TcpThreads.freePort();
        Duration connectTimeout = Duration.ofSeconds(8);
        CompletableFuture<TcpBackend> zero = CompletableFuture.supplyAsync(() -> TcpBackend.builder(LaunchEnvironment.loopback(0, 2, port))
                .jobToken(token).timeout(Duration.ofSeconds(20)).connectTimeout(connectTimeout).connect());
        List<Socket> silent = new ArrayList<>();
        TcpBackend one = null;
        try {
            try (TcpStore store = TcpStore.connect("127.0.0.1", port, token, Duration.ofSeconds(5))) {
                String address = new String(store.get(PeerMesh.addressKey(0)), StandardCharsets.UTF_8);
                int peerPort = Integer.parseInt(address.substring(address.lastIndexOf(':') + 1));
                for (int i = 0; i < 6; i++) {
                    silent.add(new Socket(InetAddress.getLoopbackAddress(), peerPort));
                }
            }
            Thread.sleep(300); // rank 0 has accepted the silent connections before rank 1 dials
            long start = System.nanoTime();
            one = TcpBackend.builder(LaunchEnvironment.loopback(1, 2, port)).jobToken(token).timeout(Duration.ofSeconds(20))
                    .connectTimeout(connectTimeout).connect();
            TcpBackend z = zero.get(20, TimeUnit.SECONDS);
            double seconds = (System.nanoTime() - start) / 1e9;
            assertTrue(seconds < 5, "connecting took " + seconds + " s with 6 silent connections on rank 0's peer port");
            TcpBackend first = one;
            CompletableFuture<Void> closing = CompletableFuture.runAsync(first::close);
            z.close();
            closing.get(20, TimeUnit.SECONDS);
            one = null;
        } finally {
            for (Socket s : silent) {
                s.close();
            }
            if (one != null) {
                one.close();
            }
        }
    }

    /** The dialing side: a squatter at rank 0's address trickling its challenge cannot hold rank 1 past its connect timeout. */
    @Test
    void aPeerAddressTricklingItsHandshakeCannotHoldADialingRankPastItsConnectTimeout() throws Exception {
        JobToken token = JobToken.of("trickle-" + System.nanoTime());
        try (TcpStoreServer server = TcpStoreServer.start(InetAddress.getLoopbackAddress(), 0, token);
             TricklingServer squatter = new TricklingServer(Handshake.PEER, 0, 2, Duration.ofMillis(200));
             TcpStore store = TcpStore.connect("127.0.0.1", server.port(), token, Duration.ofSeconds(5))) {
            store.set(PeerMesh.addressKey(0), ("127.0.0.1:" + squatter.port()).getBytes(StandardCharsets.UTF_8));
            long start = System.nanoTime();
            CommunicationException e = assertThrows(CommunicationException.class, () -> TcpBackend.builder(
                    LaunchEnvironment.loopback(1, 2, server.port())).jobToken(token).timeout(Duration.ofSeconds(20))
                    .connectTimeout(Duration.ofSeconds(2)).connect());
            double seconds = (System.nanoTime() - start) / 1e9;
            assertTrue(seconds < 3.5, "rank 1 gave up after " + seconds + " s: " + e.getMessage());
            assertTrue(e.getMessage().contains("could not connect to rank 0 at 127.0.0.1:" + squatter.port() + " within 2000 ms")
                    && e.getMessage().contains("did not finish in time"), e.getMessage());
        }
    }

    /** Slow clients fill every handshake slot of rank 0's peer port before rank 1 dials it. */
    @Test
    void slowClientsFillingAPeerPortsHandshakeSlotsDoNotKeepThePeerOut() throws Exception {
        startsUnderSlowClients(2, 0, PeerMesh.MAX_PENDING_HANDSHAKES + 16);
    }

    /** The probe of issue 40: slow clients on the store and on rank 0's peer port, four real ranks. */
    @Test
    void slowClientsOnTheStoreAndAPeerPortDoNotKeepAJobFromStarting() throws Exception {
        startsUnderSlowClients(4, TcpStoreServer.MAX_HANDSHAKES + 20, PeerMesh.MAX_PENDING_HANDSHAKES + 16);
    }

    /**
     * Starts rank 0, then opens {@code onStore} slow clients on the store and {@code onPeerPort} on
     * rank 0's peer port, then starts the other ranks: every rank must connect within the connect
     * timeout (10 s) and pass a barrier.
     */
    private static void startsUnderSlowClients(int worldSize, int onStore, int onPeerPort) throws Exception {
        Mcore4j.ensureInitialized();
        JobToken token = JobToken.of("slow-" + System.nanoTime());
        int port = TcpThreads.freePort();
        Duration connectTimeout = Duration.ofSeconds(10);
        ExecutorService pool = Executors.newFixedThreadPool(worldSize);
        List<Future<Void>> ranks = new ArrayList<>();
        try {
            ranks.add(pool.submit(() -> joinAndPassABarrier(0, worldSize, port, token, connectTimeout)));
            int peerPort;
            try (TcpStore store = TcpStore.connect("127.0.0.1", port, token, Duration.ofSeconds(5))) {
                String address = new String(store.get(PeerMesh.addressKey(0)), StandardCharsets.UTF_8);
                peerPort = Integer.parseInt(address.substring(address.lastIndexOf(':') + 1));
            }
            try (SlowClients onStoreClients = SlowClients.open(port, Handshake.STORE, onStore, Duration.ofMillis(200));
                 SlowClients onPeerClients = SlowClients.open(peerPort, Handshake.PEER, onPeerPort, Duration.ofMillis(200))) {
                Thread.sleep(500); // every slot is taken before the other ranks start
                for (int r = 1; r < worldSize; r++) {
                    int rank = r;
                    ranks.add(pool.submit(() -> joinAndPassABarrier(rank, worldSize, port, token, connectTimeout)));
                }
                for (int r = 0; r < worldSize; r++) {
                    try {
                        ranks.get(r).get(30, TimeUnit.SECONDS);
                    } catch (ExecutionException e) {
                        throw new AssertionError("rank " + r + " failed under " + onStore + " slow clients on the store and "
                                + onPeerPort + " on rank 0's peer port: " + e.getCause().getMessage(), e.getCause());
                    }
                }
            }
        } finally {
            pool.shutdownNow();
        }
    }

    private static Void joinAndPassABarrier(int rank, int worldSize, int port, JobToken token, Duration connectTimeout) {
        try (TcpBackend backend = TcpBackend.builder(LaunchEnvironment.loopback(rank, worldSize, port)).jobToken(token)
                .timeout(Duration.ofSeconds(20)).connectTimeout(connectTimeout).connect()) {
            backend.communicator(ProcessGroup.of("world", IntStream.range(0, worldSize).toArray(), rank)).barrier();
        }
        return null;
    }
}
