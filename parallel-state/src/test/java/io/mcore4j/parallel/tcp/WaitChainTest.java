package io.mcore4j.parallel.tcp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.parallel.CommunicationException;
import io.mcore4j.parallel.ProcessGroup;

import java.time.Duration;
import java.util.List;

import org.junit.jupiter.api.Test;

/**
 * {@link WaitChain} over real backends (ranks as threads, loopback): where the chain of ranks a
 * timed-out call waited for ends when that chain holds a rank that already failed, and when two
 * ranks wait for each other. The stopped-process case is in {@link StallReliabilityTest}.
 */
class WaitChainTest {

    /**
     * Rank 1 times out waiting for rank 2 (busy in no call) and, still holding its backend, does
     * something else; rank 0, waiting for rank 1, times out later and must blame rank 2, which rank
     * 1's failure blamed, not rank 1.
     */
    @Test
    void aRankThatFailedButHasNotLeftPointsToTheRankItBlamed() {
        List<TcpThreads.Outcome<Object>> out = TcpThreads.run(3, Duration.ofSeconds(2), (rank, backend, m) -> {
            switch (rank) {
                case 0 -> {
                    Thread.sleep(1500);
                    backend.communicator(ProcessGroup.of("pair-0-1", new int[] {0, 1}, 0)).barrier();
                    return null;
                }
                case 1 -> {
                    try {
                        backend.communicator(ProcessGroup.of("pair-1-2", new int[] {1, 2}, 1)).barrier();
                        return null;
                    } catch (CommunicationException e) {
                        Thread.sleep(3000); // failed, but the backend is still open
                        return e;
                    }
                }
                default -> {
                    Thread.sleep(5000);
                    return null;
                }
            }
        });
        CommunicationException zero = assertInstanceOf(CommunicationException.class, out.get(0).error(), String.valueOf(out.get(0)));
        assertEquals(List.of(2), zero.ranks(), zero.getMessage());
        assertTrue(zero.getMessage().endsWith("timed out after 2000 ms waiting for rank(s) [1]; rank 1 has failed itself, blaming rank(s) [2]"
                + ": the root cause is rank(s) [2]"), zero.getMessage());
        CommunicationException one = assertInstanceOf(CommunicationException.class, out.get(1).value(), String.valueOf(out.get(1)));
        assertEquals(List.of(2), one.ranks(), one.getMessage());
        assertTrue(one.getMessage().endsWith("waiting for rank(s) [2]; rank 2 answers but is in no call (busy, or it has not made this call)"),
                one.getMessage());
        assertNull(out.get(2).error());
    }

    /**
     * Ranks 0 and 1 wait for each other in different groups (rank 1 from a little later): rank 0,
     * timing out first, finds rank 1 waiting for it and says so; rank 1 then names rank 0.
     */
    @Test
    void twoRanksWaitingForEachOtherInDifferentCallsSaySo() {
        List<TcpThreads.Outcome<Object>> out = TcpThreads.run(2, Duration.ofSeconds(2), (rank, backend, m) -> {
            Thread.sleep(rank * 500L);
            backend.communicator(ProcessGroup.of(rank == 0 ? "a" : "b", new int[] {0, 1}, rank)).barrier();
            return null;
        });
        CommunicationException zero = assertInstanceOf(CommunicationException.class, out.get(0).error(), String.valueOf(out.get(0)));
        assertEquals(List.of(1), zero.ranks(), zero.getMessage());
        assertTrue(zero.getMessage().endsWith("timed out after 2000 ms waiting for rank(s) [1]; rank 1 is itself waiting for this rank (0) "
                + "in b[0,1] barrier: the two made their calls in a different order?"), zero.getMessage());
        CommunicationException one = assertInstanceOf(CommunicationException.class, out.get(1).error(), String.valueOf(out.get(1)));
        assertEquals(List.of(0), one.ranks(), one.getMessage());
    }
}
