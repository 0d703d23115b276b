package io.mcore4j.parallel.rendezvous;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.parallel.launch.LaunchEnvironment;

import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

class TcpStoreTest {
    private static final JobToken TOKEN = JobToken.of("store-test-token");
    private static final Duration TIMEOUT = Duration.ofSeconds(5);

    private TcpStoreServer server;

    @BeforeEach
    void start() {
        server = TcpStoreServer.start(InetAddress.getLoopbackAddress(), 0, TOKEN);
    }

    @AfterEach
    void stop() {
        server.close();
    }

    private TcpStore client(JobToken token) {
        return TcpStore.connect("127.0.0.1", server.port(), token, TIMEOUT);
    }

    @Test
    void setGetAddAndWaitAcrossClients() throws Exception {
        try (TcpStore a = client(TOKEN); TcpStore b = client(TOKEN)) {
            a.set("k", "v1".getBytes(StandardCharsets.UTF_8));
            assertEquals("v1", new String(b.get("k"), StandardCharsets.UTF_8));
            a.set("k", new byte[0]);
            assertArrayEquals(new byte[0], b.get("k"));
            assertEquals(3, a.add("n", 3));
            assertEquals(1, b.add("n", -2));
            assertEquals("1", new String(a.get("n"), StandardCharsets.UTF_8));

            // a blocked read returns as soon as another client sets the key
            CompletableFuture<byte[]> later = CompletableFuture.supplyAsync(() -> b.get("late"));
            CompletableFuture<Void> waiting = CompletableFuture.runAsync(() -> {
                try (TcpStore c = client(TOKEN)) {
                    c.waitFor(List.of("late", "n"));
                }
            });
            Thread.sleep(100);
            assertFalse(later.isDone());
            a.set("late", new byte[] {42});
            assertArrayEquals(new byte[] {42}, later.get(5, TimeUnit.SECONDS));
            waiting.get(5, TimeUnit.SECONDS);
        }
    }

    @Test
    void getTimesOutNamingTheKeyAndTheConnectionStaysUsable() {
        try (TcpStore a = client(TOKEN)) {
            long start = System.nanoTime();
            StoreTimeoutException e = assertThrows(StoreTimeoutException.class, () -> a.get("never", Duration.ofMillis(300)));
            double seconds = (System.nanoTime() - start) / 1e9;
            assertTrue(seconds >= 0.25 && seconds < 3, "took " + seconds + " s");
            assertEquals(List.of("never"), e.missingKeys());
            assertTrue(e.getMessage().contains("get 'never' timed out after 300 ms"), e.getMessage());

            StoreTimeoutException w = assertThrows(StoreTimeoutException.class,
                    () -> a.waitFor(List.of("x", "y"), Duration.ofMillis(50)));
            assertEquals(List.of("x", "y"), w.missingKeys());

            a.set("x", new byte[] {1});
            assertArrayEquals(new byte[] {1}, a.get("x", Duration.ofMillis(50)));
        }
    }

    @Test
    void wrongTokenIsRejectedAndCountedWhileTheRightOneStillWorks() {
        StoreException e = assertThrows(StoreException.class, () -> client(JobToken.of("some-other-job")));
        assertTrue(e.getMessage().contains("refused") && e.getMessage().contains("job token mismatch"), e.getMessage());
        awaitRejections(1);
        try (TcpStore a = client(TOKEN)) {
            a.set("ok", new byte[] {1});
            assertEquals(1, a.get("ok").length);
        }
        assertEquals(1, server.rejectedConnections());
    }

    @Test
    void foreignProtocolIsRejected() throws Exception {
        try (Socket s = new Socket("127.0.0.1", server.port())) {
            OutputStream out = s.getOutputStream();
            out.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n".getBytes(StandardCharsets.US_ASCII));
            out.flush();
            // the store answers with its challenge, then a rejection, then closes
            s.setSoTimeout(5000);
            while (s.getInputStream().read() >= 0) {
                // drain until the server closes
            }
        }
        awaitRejections(1);
    }

    /** The server counts a rejection just after answering it, so the client can be a moment ahead. */
    private void awaitRejections(long expected) {
        long deadline = System.nanoTime() + 5_000_000_000L;
        while (server.rejectedConnections() < expected && System.nanoTime() < deadline) {
            Thread.onSpinWait();
        }
        assertEquals(expected, server.rejectedConnections());
    }

    @Test
    void addOnANonCounterIsAnErrorThatKeepsTheConnection() {
        try (TcpStore a = client(TOKEN)) {
            a.set("text", "hello".getBytes(StandardCharsets.UTF_8));
            StoreException e = assertThrows(StoreException.class, () -> a.add("text", 1));
            assertTrue(e.getMessage().contains("not a decimal counter"), e.getMessage());
            assertEquals(5, a.add("counter", 5));
        }
    }

    @Test
    void unreachableStoreFailsWithinTheTimeout() throws Exception {
        int port;
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort();
        }
        long start = System.nanoTime();
        StoreException e = assertThrows(StoreException.class,
                () -> TcpStore.connect("127.0.0.1", port, TOKEN, Duration.ofMillis(400)));
        double seconds = (System.nanoTime() - start) / 1e9;
        assertTrue(e.getMessage().contains("not reachable within 400 ms"), e.getMessage());
        assertTrue(seconds < 3, "took " + seconds + " s");
    }

    @Test
    void derivedTokensDependOnTheJobAndExplicitTokensWin() {
        LaunchEnvironment env = LaunchEnvironment.loopback(0, 2, 4000);
        byte[] challenge = {1, 2, 3};
        JobToken a = JobToken.fromEnvironment(Map.of("SLURM_JOB_ID", "77"), env);
        JobToken same = JobToken.fromEnvironment(Map.of("SLURM_JOB_ID", "77"), LaunchEnvironment.loopback(1, 2, 4000));
        JobToken otherJob = JobToken.fromEnvironment(Map.of("SLURM_JOB_ID", "78"), env);
        JobToken otherPort = JobToken.fromEnvironment(Map.of("SLURM_JOB_ID", "77"), LaunchEnvironment.loopback(0, 2, 4001));
        assertTrue(same.verify(challenge, a.prove(challenge)), "every rank of a job derives the same token");
        assertFalse(otherJob.verify(challenge, a.prove(challenge)));
        assertFalse(otherPort.verify(challenge, a.prove(challenge)));
        assertEquals("derived from MASTER_ADDR, MASTER_PORT, WORLD_SIZE, SLURM_JOB_ID", a.origin());

        JobToken explicit = JobToken.fromEnvironment(Map.of(JobToken.ENV_VAR, "s3cret", "SLURM_JOB_ID", "77"), env);
        assertTrue(JobToken.of("s3cret").verify(challenge, explicit.prove(challenge)));
        assertFalse(explicit.toString().contains("s3cret"), explicit.toString());
        assertThrows(IllegalArgumentException.class, () -> JobToken.of(" "));
    }
}
