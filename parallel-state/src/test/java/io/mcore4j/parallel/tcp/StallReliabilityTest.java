package io.mcore4j.parallel.tcp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.types.Shape;
import io.mcore4j.parallel.CommunicationException;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ProcessGroup;
import io.mcore4j.parallel.ReduceOp;

import io.mcore4j.parallel.rendezvous.JobToken;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.Test;

/**
 * Reliability (issue 22, item 8): a stalled rank is detected at the timeout, the rank that detects
 * it closes without waiting for the stalled rank, and a rank failing afterwards because the
 * detecting rank left names the stalled rank, not the one that left. Issue 40, item 5: a rank that
 * times out waiting for a live peer, which itself waits for a stopped rank, names the stopped rank.
 * Loopback only.
 */
class StallReliabilityTest {

    /** What rank 0 saw: its failure and how long closing its backend took. */
    private record Detected(CommunicationException failure, double closeSeconds) {}

    @Test
    void theStalledRankIsBlamedByEveryoneAndClosingDoesNotWaitForIt() {
        List<TcpThreads.Outcome<Object>> out = TcpThreads.run(3, Duration.ofSeconds(2), (rank, backend, m) -> {
            if (rank == 2) {
                Thread.sleep(6000); // stalled: never joins the all-reduce
                return null;
            }
            if (rank == 0) {
                Communicator with2 = backend.communicator(ProcessGroup.of("pair-0-2", new int[] {0, 2}, 0));
                try {
                    with2.allReduce(m.ones(new Shape(2)), ReduceOp.SUM, m);
                    return null;
                } catch (CommunicationException e) {
                    long start = System.nanoTime();
                    backend.close();
                    return new Detected(e, (System.nanoTime() - start) / 1e9);
                }
            }
            // rank 1 talks only to rank 0, which leaves after detecting rank 2's stall
            Communicator with0 = backend.communicator(ProcessGroup.of("pair-0-1", new int[] {0, 1}, 1));
            Communicator sendTo0 = backend.communicator(ProcessGroup.of("pair-0-1", new int[] {0, 1}, 1));
            Thread.sleep(3000);
            try {
                return with0.allReduce(m.ones(new Shape(2)), ReduceOp.SUM, m);
            } catch (CommunicationException e) {
                // a send to the rank that left names the root cause too
                CommunicationException send = assertThrows(CommunicationException.class, () -> sendTo0.send(m.ones(new Shape(2)), 0));
                return List.of(e, send);
            }
        });
        Detected zero = (Detected) out.get(0).value();
        assertNull(out.get(0).error());
        assertEquals(List.of(2), zero.failure().ranks());
        assertTrue(zero.failure().getMessage().contains("timed out after 2000 ms waiting for rank(s) [2]"), zero.failure().getMessage());
        assertTrue(out.get(0).seconds() < 3.5, "detecting and closing took " + out.get(0).seconds() + " s");
        assertTrue(zero.closeSeconds() < 1.5, "closing after the failure took " + zero.closeSeconds() + " s (it waited for the stalled rank)");

        List<?> failures = assertInstanceOf(List.class, out.get(1).value(), String.valueOf(out.get(1)));
        for (Object f : failures) {
            CommunicationException one = assertInstanceOf(CommunicationException.class, f);
            assertEquals(List.of(2), one.ranks(), one.getMessage());
            assertTrue(one.getMessage().contains("rank 0 closed its backend after a failure")
                    && one.getMessage().contains("the root cause: rank(s) [2]"), one.getMessage());
        }
    }

    /**
     * Rank 3 of 4 is a process stopped with SIGSTOP. Rank 1 waits for it; rank 0 waits for rank 1,
     * and rank 2 for rank 0, each starting a little earlier, so their timeouts pass while the rank
     * they wait for is still alive and waiting itself. Every one of them must blame rank 3.
     */
    @Test
    void everyRankBlamesTheStoppedRankThroughTheChainOfLiveRanksWaitingForIt() throws Exception {
        JobToken token = JobToken.of("chain-" + System.nanoTime());
        int port = TcpThreads.freePort();
        Duration timeout = Duration.ofSeconds(4);
        String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
        Process stopped = new ProcessBuilder(java, "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", System.getProperty("java.class.path"),
                IdleRankMain.class.getName(), "3", "4", Integer.toString(port), "chain-token")
                .redirectErrorStream(true).start();
        CountDownLatch frozen = new CountDownLatch(1);
        try {
            CompletableFuture<List<TcpThreads.Outcome<Object>>> ranks = CompletableFuture.supplyAsync(() ->
                    TcpThreads.run(3, 4, port, timeout, Duration.ofSeconds(60), r -> JobToken.of("chain-token"), (rank, backend, m) -> {
                        Communicator waitsFor = switch (rank) {
                            case 0 -> backend.communicator(ProcessGroup.of("pair-0-1", new int[] {0, 1}, 0));
                            case 1 -> backend.communicator(ProcessGroup.of("pair-1-3", new int[] {1, 3}, 1));
                            default -> backend.communicator(ProcessGroup.of("pair-0-2", new int[] {0, 2}, 2));
                        };
                        assertTrue(frozen.await(60, TimeUnit.SECONDS), "rank 3 was not stopped");
                        Thread.sleep(rank == 2 ? 0 : rank == 0 ? 300 : 600);
                        waitsFor.barrier();
                        return null;
                    }));
            BufferedReader out = new BufferedReader(new InputStreamReader(stopped.getInputStream(), StandardCharsets.UTF_8));
            String line = out.readLine();
            assertEquals("CONNECTED", line, "rank 3's process said " + line);
            Process kill = new ProcessBuilder("kill", "-STOP", Long.toString(stopped.pid())).start();
            assertEquals(0, kill.waitFor(), "kill -STOP failed");
            frozen.countDown();
            List<TcpThreads.Outcome<Object>> out3 = ranks.get(90, TimeUnit.SECONDS);
            for (int r = 0; r < 3; r++) {
                CommunicationException e = assertInstanceOf(CommunicationException.class, out3.get(r).error(),
                        "rank " + r + ": " + out3.get(r));
                assertEquals(List.of(3), e.ranks(), "rank " + r + ": " + e.getMessage());
                assertTrue(e.getMessage().contains("rank 3 did not answer a status query within 1000 ms"), e.getMessage());
            }
            assertTrue(out3.get(0).error().getMessage().contains("timed out after 4000 ms waiting for rank(s) [1]; rank 1 is itself "
                    + "waiting for rank(s) [3] in pair-1-3[1,3] barrier; rank 3 did not answer"), out3.get(0).error().getMessage());
            assertTrue(out3.get(2).error().getMessage().contains("waiting for rank(s) [0]; rank 0 is itself waiting for rank(s) [1]")
                    && out3.get(2).error().getMessage().endsWith(": the root cause is rank(s) [3]"), out3.get(2).error().getMessage());
        } finally {
            frozen.countDown();
            stopped.destroyForcibly();
            stopped.waitFor(10, TimeUnit.SECONDS);
        }
    }
}
