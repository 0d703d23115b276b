package io.mcore4j.parallel.nccl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.parallel.CommunicationException;
import io.mcore4j.parallel.ProcessGroup;
import io.mcore4j.parallel.rendezvous.JobToken;
import io.mcore4j.parallel.rendezvous.TcpStore;
import io.mcore4j.parallel.rendezvous.TcpStoreServer;

import java.net.InetAddress;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** The id hand-over through a real store on loopback; ranks are threads, the id a fixed pattern. */
class CommIdExchangeTest {
    private static final JobToken TOKEN = JobToken.of("comm-id-exchange-test");
    private TcpStoreServer server;
    private ExecutorService pool;

    @BeforeEach
    void start() throws Exception {
        server = TcpStoreServer.start(InetAddress.getLoopbackAddress(), 0, TOKEN);
        pool = Executors.newCachedThreadPool();
    }

    @AfterEach
    void stop() {
        pool.shutdownNow();
        server.close();
    }

    private TcpStore client() {
        return TcpStore.connect(InetAddress.getLoopbackAddress().getHostAddress(), server.port(), TOKEN, Duration.ofSeconds(10));
    }

    private static UniqueId id(int seed) {
        byte[] b = new byte[UniqueId.BYTES];
        for (int i = 0; i < b.length; i++) {
            b[i] = (byte) (seed + i);
        }
        return new UniqueId(b);
    }

    @Test
    void everyMemberGetsTheIdOfGroupRankZero() throws Exception {
        int[] ranks = {5, 2, 7};
        AtomicInteger made = new AtomicInteger();
        List<Future<UniqueId>> got = new ArrayList<>();
        for (int i = 0; i < ranks.length; i++) {
            ProcessGroup g = ProcessGroup.of("dp", ranks, ranks[i]);
            int seed = 10 * i;
            got.add(pool.submit(() -> {
                try (TcpStore store = client()) {
                    return CommIdExchange.exchange(store, "nccl/" + g.key(), g, () -> {
                        made.incrementAndGet();
                        return id(seed);
                    }, Duration.ofSeconds(10));
                }
            }));
        }
        for (Future<UniqueId> f : got) {
            assertEquals(id(0), f.get(20, TimeUnit.SECONDS), "the id made by group rank 0 (global rank 5)");
        }
        assertEquals(1, made.get(), "only group rank 0 makes an id");
    }

    @Test
    void aMemberThatNeverArrivesIsNamedAtTheTimeout() throws Exception {
        int[] ranks = {0, 1, 2};
        List<Future<Throwable>> got = new ArrayList<>();
        long start = System.nanoTime();
        for (int r : new int[] {0, 2}) {
            ProcessGroup g = ProcessGroup.of("tp", ranks, r);
            got.add(pool.submit(() -> {
                try (TcpStore store = client()) {
                    CommIdExchange.exchange(store, "nccl/" + g.key(), g, () -> id(1), Duration.ofMillis(600));
                    return null;
                } catch (Throwable t) {
                    return t;
                }
            }));
        }
        for (Future<Throwable> f : got) {
            CommunicationException e = assertInstanceOf(CommunicationException.class, f.get(20, TimeUnit.SECONDS));
            assertEquals(List.of(1), e.ranks());
            assertEquals("tp[0,1,2]", e.group());
            assertTrue(e.getMessage().contains("create NCCL communicator") && e.getMessage().contains("rank(s) [1] did not arrive"),
                    e.getMessage());
        }
        assertTrue((System.nanoTime() - start) / 1e9 < 10, "fails at the timeout, not later");
    }
}
