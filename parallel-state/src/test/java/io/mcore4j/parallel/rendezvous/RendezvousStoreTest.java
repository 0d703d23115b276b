package io.mcore4j.parallel.rendezvous;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.parallel.CommunicationException;
import io.mcore4j.parallel.launch.LaunchEnvironment;

import java.net.InetAddress;
import java.net.ServerSocket;
import java.time.Duration;
import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.Test;

/** The store port every multi-process backend picks, and connecting to the store from rank 0 and the others. */
class RendezvousStoreTest {
    private static final LaunchEnvironment ENV = LaunchEnvironment.loopback(1, 4, 29500);
    private static final JobToken TOKEN = JobToken.of("rendezvous-store-test");

    @Test
    void storePortFollowsMasterPortUnlessTorchrunHoldsIt() {
        assertEquals(29500, RendezvousStore.port(ENV, Map.of()));
        assertEquals(29501, RendezvousStore.port(ENV, Map.of("TORCHELASTIC_USE_AGENT_STORE", "True")));
        assertEquals(29501, RendezvousStore.port(ENV, Map.of("TORCHELASTIC_USE_AGENT_STORE", " true ")));
        assertEquals(29500, RendezvousStore.port(ENV, Map.of("TORCHELASTIC_USE_AGENT_STORE", "False")));
        assertEquals(31000, RendezvousStore.port(ENV, Map.of("TORCHELASTIC_USE_AGENT_STORE", "True", "MCORE4J_STORE_PORT", "31000")));
        assertEquals(29500, RendezvousStore.port(ENV, Map.of("MCORE4J_STORE_PORT", " ")));
    }

    @Test
    void invalidStorePortsAreNamed() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> RendezvousStore.port(ENV, Map.of("MCORE4J_STORE_PORT", "http")));
        assertTrue(e.getMessage().contains("MCORE4J_STORE_PORT=http is not a port number"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> RendezvousStore.port(ENV, Map.of("MCORE4J_STORE_PORT", "70000")));
        assertTrue(e.getMessage().contains("MCORE4J_STORE_PORT=70000 is outside [1, 65535]"), e.getMessage());
        LaunchEnvironment lastPort = LaunchEnvironment.loopback(0, 2, 65535);
        e = assertThrows(IllegalArgumentException.class,
                () -> RendezvousStore.port(lastPort, Map.of("TORCHELASTIC_USE_AGENT_STORE", "True")));
        assertTrue(e.getMessage().contains("no next port"), e.getMessage());
    }

    @Test
    void rankZeroHostsTheStoreAndEveryRankSharesIt() {
        int port = freePort();
        try (RendezvousStore zero = RendezvousStore.connect(LaunchEnvironment.loopback(0, 2, port), port, TOKEN, Duration.ofSeconds(5));
             RendezvousStore one = RendezvousStore.connect(LaunchEnvironment.loopback(1, 2, port), port, TOKEN, Duration.ofSeconds(5))) {
            assertTrue(zero.hostsServer());
            assertFalse(one.hostsServer());
            zero.client().set("k", new byte[] {7});
            assertArrayEquals(new byte[] {7}, one.client().get("k"));
            assertEquals("127.0.0.1:" + port, one.client().address());
        }
    }

    @Test
    void anUnreachableStoreNamesItsAddress() throws Exception {
        int port = freePort();
        CommunicationException e = assertThrows(CommunicationException.class,
                () -> RendezvousStore.connect(LaunchEnvironment.loopback(1, 2, port), port, TOKEN, Duration.ofMillis(300)));
        assertEquals(List.of(0), e.ranks());
        assertTrue(e.getMessage().contains("world connect: rank 1 could not reach rank 0's store at 127.0.0.1:" + port),
                e.getMessage());
    }

    @Test
    void aPortRankZeroCannotBindFailsAsTheStoreOfRankZero() throws Exception {
        try (ServerSocket taken = new ServerSocket(0, 8, InetAddress.getLoopbackAddress())) {
            int port = taken.getLocalPort();
            CommunicationException e = assertThrows(CommunicationException.class,
                    () -> RendezvousStore.connect(LaunchEnvironment.loopback(0, 2, port), port, TOKEN, Duration.ofMillis(300)));
            assertTrue(e.getMessage().contains("rank 0: the rendezvous store of rank 0 failed: cannot start the rendezvous store"),
                    e.getMessage());
        }
    }

    @Test
    void closingAfterAFailureClosesTheStoreAndTranslatesStoreFailures() {
        int port = freePort();
        RendezvousStore zero = RendezvousStore.connect(LaunchEnvironment.loopback(0, 1, port), port, TOKEN, Duration.ofSeconds(5));
        RuntimeException other = new IllegalStateException("not a store failure");
        assertSame(other, zero.closeAfter(other));
        assertThrows(StoreException.class, () -> zero.client().set("k", new byte[0]), "the client is closed");
        RuntimeException translated = zero.closeAfter(new StoreException("gone", null));
        assertTrue(translated instanceof CommunicationException
                && translated.getMessage().contains("rank 0: the rendezvous store of rank 0 failed: gone"), translated.getMessage());
    }

    private static int freePort() {
        try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            return s.getLocalPort();
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }
}
