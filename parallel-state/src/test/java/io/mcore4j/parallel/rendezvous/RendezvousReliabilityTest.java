package io.mcore4j.parallel.rendezvous;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.parallel.launch.LaunchEnvironment;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.nio.ByteBuffer;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;

import org.junit.jupiter.api.Test;

/**
 * Reliability (issue 22, items 2, 3 and 7; issue 40, item 6): the store proves the job token to its
 * clients, a job without a secret token refuses to listen beyond loopback, the store's threads and
 * request sizes are bounded whatever connects to it, and connections that trickle their handshake
 * in are cut off and cannot keep real clients out. Loopback only.
 */
class RendezvousReliabilityTest {
    private static final JobToken TOKEN = JobToken.of("rendezvous-reliability");
    private static final InetAddress LOOPBACK = InetAddress.getLoopbackAddress();

    /**
     * A process that bound the job's port first and poses as the store: it speaks the protocol and
     * accepts everyone, but cannot prove the token, so its "proof" is random bytes.
     */
    private static CompletableFuture<Void> impostor(ServerSocket socket, byte purpose) {
        return CompletableFuture.runAsync(() -> {
            try (Socket s = socket.accept()) {
                DataOutputStream out = new DataOutputStream(new BufferedOutputStream(s.getOutputStream()));
                DataInputStream in = new DataInputStream(new BufferedInputStream(s.getInputStream()));
                byte[] nonce = new byte[16];
                out.writeInt(Handshake.MAGIC);
                out.writeByte(purpose);
                out.writeInt(purpose == Handshake.STORE ? -1 : 0);
                out.writeInt(purpose == Handshake.STORE ? -1 : 2);
                out.write(nonce);
                out.flush();
                in.readFully(new byte[4 + 1 + 4 + 4 + 32 + 16]); // the client's answer
                out.writeByte(0);
                out.writeUTF("welcome");
                byte[] fake = new byte[32];
                new SecureRandom().nextBytes(fake);
                out.write(fake);
                out.flush();
                in.read(); // wait until the client hangs up
            } catch (IOException e) {
                // the client hung up
            }
        });
    }

    @Test
    void aClientRefusesAStoreThatCannotProveTheToken() throws Exception {
        try (ServerSocket squatter = new ServerSocket(0, 8, LOOPBACK)) {
            CompletableFuture<Void> fake = impostor(squatter, Handshake.STORE);
            StoreException e = assertThrows(StoreException.class,
                    () -> TcpStore.connect("127.0.0.1", squatter.getLocalPort(), TOKEN, Duration.ofSeconds(5)));
            assertTrue(e.getMessage().contains("did not prove it knows the job token"), e.getMessage());
            fake.get();
        }
    }

    @Test
    void aRankRefusesAPeerThatCannotProveTheToken() throws Exception {
        try (ServerSocket squatter = new ServerSocket(0, 8, LOOPBACK)) {
            CompletableFuture<Void> fake = impostor(squatter, Handshake.PEER);
            try (Socket s = new Socket(LOOPBACK, squatter.getLocalPort())) {
                DataInputStream in = new DataInputStream(new BufferedInputStream(s.getInputStream()));
                DataOutputStream out = new DataOutputStream(new BufferedOutputStream(s.getOutputStream()));
                Handshake.RejectedException e = assertThrows(Handshake.RejectedException.class,
                        () -> Handshake.respond(in, out, TOKEN, Handshake.PEER, 1, 2, 0, new SecureRandom()));
                assertTrue(e.getMessage().contains("a peer rank claiming rank 0 did not prove it knows the job token"),
                        e.getMessage());
            }
            fake.get();
        }
    }

    @Test
    void aDerivedTokenRefusesToListenBeyondLoopback() {
        // rank 0 of a two-machine job (one rank per machine)
        LaunchEnvironment everyInterface = new LaunchEnvironment(0, 0, 2, 1, "0.0.0.0", 29500);
        JobToken derived = JobToken.fromEnvironment(Map.of(), everyInterface);
        IllegalStateException e = assertThrows(IllegalStateException.class,
                () -> RendezvousStore.connect(everyInterface, 29500, derived, Duration.ofSeconds(1)));
        assertTrue(e.getMessage().contains("rank 0's rendezvous store would listen on every interface (0.0.0.0)")
                && e.getMessage().contains("Set MCORE4J_JOB_TOKEN") && e.getMessage().contains("MCORE4J_ALLOW_DERIVED_TOKEN=1"),
                e.getMessage());
        // loopback, a secret, or an explicit opt-in may listen (checked without binding anything)
        derived.checkMayListen(LOOPBACK, "test");
        JobToken.fromEnvironment(Map.of(JobToken.ENV_VAR, "s3cret"), everyInterface).checkMayListen(RendezvousStore.wildcard(), "test");
        JobToken.fromEnvironment(Map.of(JobToken.ALLOW_DERIVED_VAR, "1"), everyInterface)
                .checkMayListen(RendezvousStore.wildcard(), "test");
        assertTrue(!derived.isSecret() && TOKEN.isSecret());
    }

    @Test
    void aJobOnOneMachineStaysOnLoopbackWhateverMasterAddrSays() throws Exception {
        int port;
        try (ServerSocket probe = new ServerSocket(0, 1, LOOPBACK)) {
            port = probe.getLocalPort();
        }
        // torchrun sets MASTER_ADDR to the host's name; every rank is local, so no token is needed off loopback
        LaunchEnvironment named = new LaunchEnvironment(0, 0, 1, 1, "0.0.0.0", port);
        JobToken derived = JobToken.fromEnvironment(Map.of(), named);
        try (RendezvousStore store = RendezvousStore.connect(named, port, derived, Duration.ofSeconds(5))) {
            assertTrue(store.hostsServer());
            assertEquals("127.0.0.1:" + port, store.client().address());
        }
        assertEquals("db-host-7", RendezvousStore.storeHost(new LaunchEnvironment(1, 0, 2, 1, "db-host-7", port)));
    }

    @Test
    void silentConnectionsCostBoundedThreadsAndDoNotKeepRealClientsOut() throws Exception {
        try (TcpStoreServer server = TcpStoreServer.start(LOOPBACK, 0, TOKEN)) {
            List<Socket> silent = new ArrayList<>();
            try {
                for (int i = 0; i < 300; i++) {
                    silent.add(new Socket(LOOPBACK, server.port()));
                }
                long deadline = System.nanoTime() + 5_000_000_000L;
                while ((server.rejectedConnections() < 300 - TcpStoreServer.MAX_HANDSHAKES || storeThreads() > TcpStoreServer.MAX_HANDSHAKES)
                        && System.nanoTime() < deadline) {
                    Thread.sleep(20);
                }
                assertTrue(storeThreads() <= TcpStoreServer.MAX_HANDSHAKES, storeThreads() + " store threads for 300 silent connections");
                assertTrue(server.rejectedConnections() >= 300 - TcpStoreServer.MAX_HANDSHAKES,
                        server.rejectedConnections() + " rejected");
                // with every handshake slot taken, a real client still gets in at once
                assertTimeoutPreemptively(Duration.ofSeconds(10), () -> {
                    try (TcpStore client = TcpStore.connect("127.0.0.1", server.port(), TOKEN, Duration.ofSeconds(8))) {
                        client.set("k", new byte[] {1});
                    }
                });
            } finally {
                for (Socket s : silent) {
                    s.close();
                }
            }
        }
    }

    private static long storeThreads() {
        return Thread.getAllStackTraces().keySet().stream().filter(t -> t.getName().startsWith("mcore4j-store-client-")).count();
    }

    /** Issue 40, item 6: the limit is on the whole handshake, not on each read. */
    @Test
    void aHandshakeTricklingInIsCutOffAtTheLimitOfTheWholeHandshake() throws Exception {
        try (TcpStoreServer server = TcpStoreServer.start(LOOPBACK, 0, TOKEN); Socket s = new Socket(LOOPBACK, server.port())) {
            s.setSoTimeout(5_000);
            InputStream in = s.getInputStream();
            OutputStream out = s.getOutputStream();
            assertEquals(29, in.readNBytes(29).length, "the store's challenge");
            byte[] prefix = ByteBuffer.allocate(60).putInt(Handshake.MAGIC).put(Handshake.STORE).putInt(0).putInt(-1).array();
            s.setSoTimeout(200); // also the pace: one byte per 200 ms, well within any per-read limit
            long start = System.nanoTime();
            double seconds = -1;
            for (int i = 0; seconds < 0 && System.nanoTime() - start < (TcpStoreServer.HANDSHAKE_TIMEOUT_MS + 3_000) * 1_000_000L; i++) {
                try {
                    out.write(prefix[Math.min(i, prefix.length - 1)]);
                    out.flush();
                    if (in.read() < 0) {
                        seconds = (System.nanoTime() - start) / 1e9;
                    }
                } catch (SocketTimeoutException e) {
                    // still open: send the next byte
                } catch (IOException e) {
                    seconds = (System.nanoTime() - start) / 1e9;
                }
            }
            assertTrue(seconds > 0, "the store still kept a connection sending a byte per 200 ms after "
                    + (TcpStoreServer.HANDSHAKE_TIMEOUT_MS + 3_000) + " ms");
            assertTrue(seconds < TcpStoreServer.HANDSHAKE_TIMEOUT_MS / 1000.0 + 1.5, "closed after " + seconds + " s");
            long deadline = System.nanoTime() + 2_000_000_000L;
            while (server.rejectedConnections() == 0 && System.nanoTime() < deadline) {
                Thread.sleep(10);
            }
            assertEquals(1, server.rejectedConnections());
        }
    }

    /** The dialing side too: a squatter trickling its challenge cannot hold a client past its timeout. */
    @Test
    void aStoreTricklingItsHandshakeCannotHoldAClientPastItsTimeout() throws Exception {
        try (TricklingServer squatter = new TricklingServer(Handshake.STORE, -1, -1, Duration.ofMillis(200))) {
            long start = System.nanoTime();
            StoreException e = assertThrows(StoreException.class,
                    () -> TcpStore.connect("127.0.0.1", squatter.port(), TOKEN, Duration.ofSeconds(2)));
            double seconds = (System.nanoTime() - start) / 1e9;
            assertTrue(seconds < 3.5, "the client gave up after " + seconds + " s: " + e.getMessage());
            assertTrue(e.getMessage().contains("was not reachable within 2000 ms") && e.getMessage().contains("did not finish in time"),
                    e.getMessage());
        }
    }

    /** Issue 40, item 6: connections that trickle in every handshake slot cannot keep a real client out. */
    @Test
    void slowClientsInEveryHandshakeSlotDoNotKeepARealClientOut() throws Exception {
        try (TcpStoreServer server = TcpStoreServer.start(LOOPBACK, 0, TOKEN);
             SlowClients slow = SlowClients.open(server.port(), Handshake.STORE, TcpStoreServer.MAX_HANDSHAKES + 20, Duration.ofMillis(200))) {
            Thread.sleep(500); // every slot is taken, and the slow clients keep it so
            assertTimeoutPreemptively(Duration.ofSeconds(10), () -> {
                try (TcpStore client = TcpStore.connect("127.0.0.1", server.port(), TOKEN, Duration.ofSeconds(4))) {
                    client.set("k", new byte[] {1});
                    assertEquals(1, client.get("k")[0]);
                }
            });
        }
    }

    @Test
    void anOversizedWaitIsRefusedNamingTheBound() throws Exception {
        try (TcpStoreServer server = TcpStoreServer.start(LOOPBACK, 0, TOKEN);
             Socket s = new Socket(LOOPBACK, server.port())) {
            DataInputStream in = new DataInputStream(new BufferedInputStream(s.getInputStream()));
            DataOutputStream out = new DataOutputStream(new BufferedOutputStream(s.getOutputStream()));
            Handshake.respond(in, out, TOKEN, Handshake.STORE, 0, -1, -1, new SecureRandom());
            out.writeByte(StoreProtocol.WAIT);
            out.writeInt(Integer.MAX_VALUE);
            out.flush();
            assertEquals(StoreProtocol.ERROR, in.readByte());
            String message = in.readUTF();
            assertTrue(message.contains("a wait for 2147483647 keys is outside [0, 10000]"), message);
            // the store survived: another client works
            try (TcpStore client = TcpStore.connect("127.0.0.1", server.port(), TOKEN, Duration.ofSeconds(5))) {
                client.set("k", new byte[] {1});
                assertEquals(1, client.get("k")[0]);
            }
            assertThrows(IllegalArgumentException.class, () -> {
                try (TcpStore client = TcpStore.connect("127.0.0.1", server.port(), TOKEN, Duration.ofSeconds(5))) {
                    client.waitFor(new ArrayList<>(java.util.Collections.nCopies(10_001, "k")));
                }
            });
        }
    }
}
