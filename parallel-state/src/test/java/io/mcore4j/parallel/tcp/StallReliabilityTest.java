package io.mcore4j.parallel.tcp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.types.Shape;
import io.mcore4j.parallel.CommunicationException;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ProcessGroup;
import io.mcore4j.parallel.ReduceOp;

import java.time.Duration;
import java.util.List;

import org.junit.jupiter.api.Test;

/**
 * Reliability (issue 22, item 8): a stalled rank is detected at the timeout, the rank that detects
 * it closes without waiting for the stalled rank, and a rank failing afterwards because the
 * detecting rank left names the stalled rank, not the one that left. Loopback only.
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
            Thread.sleep(3000);
            return with0.allReduce(m.ones(new Shape(2)), ReduceOp.SUM, m);
        });
        Detected zero = (Detected) out.get(0).value();
        assertNull(out.get(0).error());
        assertEquals(List.of(2), zero.failure().ranks());
        assertTrue(zero.failure().getMessage().contains("timed out after 2000 ms waiting for rank(s) [2]"), zero.failure().getMessage());
        assertTrue(out.get(0).seconds() < 3.5, "detecting and closing took " + out.get(0).seconds() + " s");
        assertTrue(zero.closeSeconds() < 1.5, "closing after the failure took " + zero.closeSeconds() + " s (it waited for the stalled rank)");

        CommunicationException one = assertInstanceOf(CommunicationException.class, out.get(1).error());
        assertEquals(List.of(2), one.ranks(), one.getMessage());
        assertTrue(one.getMessage().contains("rank 0 closed its backend after a failure")
                && one.getMessage().contains("the root cause: rank(s) [2]"), one.getMessage());
    }
}
