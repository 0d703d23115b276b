package io.mcore4j.parallel.tcp;

import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.core.Mcore4j;
import io.mcore4j.parallel.launch.LaunchEnvironment;
import io.mcore4j.parallel.rendezvous.JobToken;
import io.mcore4j.parallel.rendezvous.TcpStore;

import java.net.InetAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.Test;

/**
 * Reliability (issue 22, item 6): silent connections to a rank's peer port do not delay the real
 * peers' handshakes (they used to be served one at a time, 10 s each). Loopback only.
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
}
