package io.mcore4j.parallel.tcp;

import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.function.BiConsumer;

/**
 * Whom to blame when a call of this rank times out: the ranks it waited for may themselves be
 * waiting for another rank, the one that actually stalled. So before the call fails, this rank asks
 * each rank it waited for what it is waiting for ({@link Frame#STATUS_QUERY}; a peer's link reader
 * thread answers, so a rank blocked in a call answers at once) and follows the answers:
 * <ul>
 *   <li>a rank waiting for other ranks points on to them (they are asked in turn);</li>
 *   <li>a rank in no call that has failed points to the ranks its failure blamed, as does a rank
 *       that left after a failure;</li>
 *   <li>the chain ends at a rank that does not answer within the grace (stopped, hung, cut off),
 *       one that answers but is in no call (busy, or it never made the call), one that waits only
 *       for this rank (the two made their calls in a different order), or one that left without a
 *       failure (it died).</li>
 * </ul>
 * The ranks where chains end are the root cause; if every chain loops back, the ranks waited for
 * are blamed. One grace covers the whole search: ranks that answer cost only their round trip.
 */
final class WaitChain {
    /**
     * @param roots the ranks to blame (sorted, never empty)
     * @param explanation what the chain showed, to append to the timeout message: {@code "; rank 1
     *                    is waiting for rank(s) [3] in ...; rank 3 did not answer ...: the root cause is rank(s) [3]"}
     */
    record Verdict(List<Integer> roots, String explanation) {}

    private final int self;
    private final Inbox inbox;
    private final BiConsumer<Integer, Frame> send;
    private final long graceMillis;

    /**
     * @param self this rank
     * @param inbox this rank's inbox, which collects the answers
     * @param send hands a frame to a peer's link (dropping it if the peer is gone)
     * @param graceMillis how long to wait, in all, for the answers
     */
    WaitChain(int self, Inbox inbox, BiConsumer<Integer, Frame> send, long graceMillis) {
        this.self = self;
        this.inbox = inbox;
        this.send = send;
        this.graceMillis = graceMillis;
    }

    /**
     * Asks {@code missing} and the ranks they wait for, directly or not, what they wait for.
     *
     * @param missing the ranks a call of this rank timed out waiting for (not empty)
     * @return whom to blame and why
     */
    Verdict trace(List<Integer> missing) {
        long id = inbox.openQuery();
        try {
            Set<Integer> asked = new LinkedHashSet<>();
            ask(id, missing, asked);
            long deadline = System.nanoTime() + graceMillis * 1_000_000;
            Map<Integer, PeerStatus> answers = Map.of();
            while (true) {
                answers = inbox.awaitAnswers(id, asked, answers.size(), deadline);
                boolean askedMore = false;
                for (PeerStatus s : answers.values()) {
                    askedMore |= ask(id, s.waitingFor(), asked);
                }
                if (!askedMore && (settled(asked, answers) || System.nanoTime() - deadline >= 0)) {
                    return resolve(missing, answers);
                }
            }
        } finally {
            inbox.closeQuery(id);
        }
    }

    /** Sends query {@code id} to each rank of {@code ranks} not asked yet (never to this rank). */
    private boolean ask(long id, List<Integer> ranks, Set<Integer> asked) {
        boolean any = false;
        for (int r : ranks) {
            if (r != self && asked.add(r)) {
                send.accept(r, Frame.statusQuery(id));
                any = true;
            }
        }
        return any;
    }

    private boolean settled(Set<Integer> asked, Map<Integer, PeerStatus> answers) {
        for (int r : asked) {
            if (!answers.containsKey(r) && inbox.goneReason(r) == null) {
                return false;
            }
        }
        return true;
    }

    private Verdict resolve(List<Integer> missing, Map<Integer, PeerStatus> answers) {
        TreeSet<Integer> roots = new TreeSet<>();
        StringBuilder why = new StringBuilder();
        Set<Integer> seen = new LinkedHashSet<>();
        for (int r : missing) {
            visit(r, answers, seen, roots, why);
        }
        if (roots.isEmpty()) {
            why.append("; the ranks wait for each other");
            roots.addAll(missing);
        }
        if (!roots.equals(new TreeSet<>(missing))) {
            why.append(": the root cause is rank(s) ").append(roots);
        }
        return new Verdict(new ArrayList<>(roots), why.toString());
    }

    private void visit(int r, Map<Integer, PeerStatus> answers, Set<Integer> seen, Set<Integer> roots, StringBuilder why) {
        if (!seen.add(r)) {
            return;
        }
        PeerStatus s = answers.get(r);
        String gone = inbox.goneReason(r);
        if (s == null && gone != null) {
            why.append("; ").append(gone);
            roots.addAll(inbox.blameFor(r));
        } else if (s == null) {
            why.append("; rank ").append(r).append(" did not answer a status query within ").append(graceMillis)
                    .append(" ms (stopped, hung or cut off?)");
            roots.add(r);
        } else if (s.waitingFor().equals(List.of(self))) {
            why.append("; rank ").append(r).append(" is itself waiting for this rank (").append(self).append(") in ")
                    .append(s.waitingIn()).append(": the two made their calls in a different order?");
            roots.add(r);
        } else if (!s.waitingFor().isEmpty()) {
            why.append("; rank ").append(r).append(" is itself waiting for rank(s) ").append(s.waitingFor()).append(" in ")
                    .append(s.waitingIn());
            for (int next : s.waitingFor()) {
                if (next != self) {
                    visit(next, answers, seen, roots, why);
                }
            }
        } else if (s.failed()) {
            List<Integer> blamed = new ArrayList<>(s.blamed());
            blamed.remove(Integer.valueOf(self));
            blamed.remove(Integer.valueOf(r));
            why.append("; rank ").append(r).append(" has failed itself, blaming rank(s) ").append(s.blamed());
            if (blamed.isEmpty()) {
                roots.add(r);
            } else {
                roots.addAll(blamed);
            }
        } else {
            why.append("; rank ").append(r).append(" answers but is in no call (busy, or it has not made this call)");
            roots.add(r);
        }
    }
}
