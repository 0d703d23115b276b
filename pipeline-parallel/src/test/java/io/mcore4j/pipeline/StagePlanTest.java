package io.mcore4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.junit.jupiter.api.Test;

/**
 * Executes every stage's plan in a model of the transport, for every valid configuration in a
 * range, and checks that it completes (no deadlock), that each receive gets exactly the message
 * it expects, and that data dependencies hold. Two transports are modelled: buffered (send returns
 * at once, like the in-JVM backend) and synchronous (send waits until the peer is at the matching
 * receive, like NCCL kernels on one stream).
 */
class StagePlanTest {

    /** A message on the wire: what the sender says it is, in the receiver's terms. */
    private record Message(StageAction.Kind kind, int chunk, int microBatch) {}

    @Test
    void plansCompleteAndMatchUnderBufferedAndSynchronousTransports() {
        int configs = 0;
        for (int pp = 1; pp <= 8; pp++) {
            for (int vp = 1; vp <= (pp == 1 ? 1 : 4); vp++) {
                for (int m = 1; m <= 16; m++) {
                    for (int g : groupSizes(pp, vp, m)) {
                        for (boolean forwardOnly : new boolean[] {false, true}) {
                            StagePlan plan = StagePlan.of(ScheduleTable.of(pp, vp, m, g), forwardOnly);
                            checkStructure(plan);
                            simulate(plan, false);
                            simulate(plan, true);
                            configs++;
                        }
                    }
                }
            }
        }
        assertTrue(configs > 500, "covered " + configs + " configurations");
    }

    @Test
    void activationMemoryIsBoundedByWarmupPlusOne() {
        for (int[] c : new int[][] {{4, 1, 8, 0}, {4, 2, 8, 4}, {2, 2, 5, 3}, {3, 3, 9, 3}, {2, 1, 8, 0}, {1, 1, 4, 0}}) {
            ScheduleTable t = ScheduleTable.of(c[0], c[1], c[2], c[3]);
            StagePlan plan = StagePlan.of(t, false);
            for (int r = 0; r < c[0]; r++) {
                int peak = plan.peakLiveMicroBatches(r);
                assertTrue(peak <= t.warmup(r) + 1, t + " stage " + r + ": peak " + peak + " > warmup " + t.warmup(r) + " + 1");
                assertEquals(Math.min(t.warmup(r) + 1, t.totalVirtualMicroBatches()), peak, t + " stage " + r);
            }
            StagePlan eval = StagePlan.of(t, true);
            for (int r = 0; r < c[0]; r++) {
                assertEquals(1, eval.peakLiveMicroBatches(r), t + " forward-only stage " + r + ": " + eval.peakLiveMicroBatches(r));
            }
        }
    }

    @Test
    void buffersNothingAwayWithTheModelledCosts() {
        // with a forward costing 1 and a backward 2, executing the plans over a buffered transport
        // ends exactly when sending every output the moment it exists would
        for (int pp = 2; pp <= 6; pp++) {
            for (int vp = 1; vp <= 3; vp++) {
                for (int m : new int[] {4, 8, 12}) {
                    for (int g : groupSizes(pp, vp, m)) {
                        StagePlan plan = StagePlan.of(ScheduleTable.of(pp, vp, m, g), false);
                        assertEquals(eagerMakespan(plan.table()), planMakespan(plan), plan.toString());
                    }
                }
            }
        }
    }

    private static long cost(StageAction a) {
        return a.kind() == StageAction.Kind.FORWARD ? StagePlan.FORWARD_COST : StagePlan.BACKWARD_COST;
    }

    /** Each stage runs its computations as soon as their inputs exist. */
    private static long eagerMakespan(ScheduleTable t) {
        int n = t.pipelineSize();
        Map<String, Long> ends = new HashMap<>();
        long[] clock = new long[n];
        int[] pc = new int[n];
        int remaining = 0;
        List<List<StageAction>> orders = new ArrayList<>();
        for (int p = 0; p < n; p++) {
            orders.add(t.computeOrder(p, false));
            remaining += orders.get(p).size();
        }
        while (remaining > 0) {
            for (int p = 0; p < n; p++) {
                while (pc[p] < orders.get(p).size()) {
                    StageAction a = orders.get(p).get(pc[p]);
                    String input = inputKey(t, p, a);
                    if (input != null && !ends.containsKey(input)) {
                        break;
                    }
                    clock[p] = Math.max(clock[p], input == null ? 0 : ends.get(input)) + cost(a);
                    ends.put(p + "/" + a.kind() + "/" + a.chunk() + "/" + a.microBatch(), clock[p]);
                    pc[p]++;
                    remaining--;
                }
            }
        }
        return java.util.Arrays.stream(clock).max().orElse(0);
    }

    /** The plans over a buffered transport: sends at their plan position, receives wait for them. */
    private static long planMakespan(StagePlan plan) {
        ScheduleTable t = plan.table();
        int n = t.pipelineSize();
        Map<String, Long> sentAt = new HashMap<>();
        long[] clock = new long[n];
        int[] pc = new int[n];
        boolean done = false;
        while (!done) {
            done = true;
            for (int p = 0; p < n; p++) {
                List<StageAction> actions = plan.actions(p);
                while (pc[p] < actions.size()) {
                    StageAction a = actions.get(pc[p]);
                    if (a.kind().isCompute()) {
                        clock[p] += cost(a);
                    } else if (a.kind() == StageAction.Kind.SEND_ACTIVATION || a.kind() == StageAction.Kind.SEND_GRADIENT) {
                        sentAt.put(a.peer() + " " + asReceived(t, p, a), clock[p]);
                    } else {
                        Long at = sentAt.get(p + " " + new Message(a.kind(), a.chunk(), a.microBatch()));
                        if (at == null) {
                            break;
                        }
                        clock[p] = Math.max(clock[p], at);
                    }
                    pc[p]++;
                }
                done &= pc[p] == actions.size();
            }
        }
        return java.util.Arrays.stream(clock).max().orElse(0);
    }

    /** Key of the computation whose result {@code a} on stage {@code p} receives, or null. */
    private static String inputKey(ScheduleTable t, int p, StageAction a) {
        int last = t.pipelineSize() - 1;
        int c = a.chunk();
        if (a.kind() == StageAction.Kind.FORWARD) {
            if (p == 0) {
                return c == 0 ? null : last + "/FORWARD/" + (c - 1) + "/" + a.microBatch();
            }
            return (p - 1) + "/FORWARD/" + c + "/" + a.microBatch();
        }
        if (p == last) {
            return c == t.virtualSize() - 1 ? null : "0/BACKWARD/" + (c + 1) + "/" + a.microBatch();
        }
        return (p + 1) + "/BACKWARD/" + c + "/" + a.microBatch();
    }

    @Test
    void noPipeliningHasNoTransfers() {
        StagePlan plan = StagePlan.of(ScheduleTable.nonInterleaved(1, 3), false);
        assertEquals(ScheduleTable.nonInterleaved(1, 3).computeOrder(0, false), plan.actions(0));
    }

    private static List<Integer> groupSizes(int pp, int vp, int m) {
        List<Integer> out = new ArrayList<>();
        if (vp == 1) {
            out.add(0);
            return out;
        }
        for (int g = pp; g <= m; g++) {
            if (m % g == 0 || m % g >= pp) {
                out.add(g);
            }
        }
        return out;
    }

    /** Computations keep the table's order; each transfer sits between its producer and consumer. */
    private static void checkStructure(StagePlan plan) {
        ScheduleTable t = plan.table();
        int last = t.pipelineSize() - 1;
        for (int p = 0; p <= last; p++) {
            List<StageAction> computes = new ArrayList<>();
            Set<String> done = new HashSet<>();
            for (StageAction a : plan.actions(p)) {
                String key = a.chunk() + "/" + a.microBatch();
                switch (a.kind()) {
                    case FORWARD -> {
                        boolean local = p == 0 && a.chunk() == 0;
                        assertEquals(!local, done.contains("ra" + key), plan + " stage " + p + " forward " + key);
                        done.add("f" + key);
                        computes.add(a);
                    }
                    case BACKWARD -> {
                        boolean local = p == last && a.chunk() == t.virtualSize() - 1;
                        assertEquals(!local, done.contains("rg" + key), plan + " stage " + p + " backward " + key);
                        assertTrue(done.contains("f" + key));
                        done.add("b" + key);
                        computes.add(a);
                    }
                    case SEND_ACTIVATION -> assertTrue(done.contains("f" + key), plan + " sends before forward");
                    case SEND_GRADIENT -> assertTrue(done.contains("b" + key), plan + " sends before backward");
                    case RECEIVE_ACTIVATION -> done.add("ra" + key);
                    case RECEIVE_GRADIENT -> {
                        assertTrue(done.contains("f" + key), plan + " receives a gradient before the forward");
                        done.add("rg" + key);
                    }
                }
            }
            assertEquals(t.computeOrder(p, plan.forwardOnly()), computes, plan + " stage " + p);
        }
    }

    /** Runs all plans step by step; fails on a deadlock or on a receive that gets the wrong message. */
    private static void simulate(StagePlan plan, boolean synchronous) {
        ScheduleTable t = plan.table();
        int n = t.pipelineSize();
        int[] pc = new int[n];
        Map<String, ArrayDeque<Message>> links = new HashMap<>();
        while (true) {
            boolean progress = false;
            boolean finished = true;
            for (int p = 0; p < n; p++) {
                List<StageAction> actions = plan.actions(p);
                while (pc[p] < actions.size()) {
                    StageAction a = actions.get(pc[p]);
                    if (a.kind().isCompute()) {
                        pc[p]++;
                    } else if (a.kind() == StageAction.Kind.SEND_ACTIVATION || a.kind() == StageAction.Kind.SEND_GRADIENT) {
                        Message msg = asReceived(t, p, a);
                        if (synchronous) {
                            int q = a.peer();
                            List<StageAction> peerActions = plan.actions(q);
                            if (pc[q] >= peerActions.size()) {
                                fail(plan + " stage " + p + " sends " + a + " to a finished stage");
                            }
                            StageAction r = peerActions.get(pc[q]);
                            boolean isReceive = r.kind() == StageAction.Kind.RECEIVE_ACTIVATION
                                    || r.kind() == StageAction.Kind.RECEIVE_GRADIENT;
                            if (!isReceive || r.peer() != p) {
                                break;
                            }
                            assertEquals(new Message(r.kind(), r.chunk(), r.microBatch()), msg,
                                    plan + " synchronous: stage " + q + " receives the wrong message from " + p);
                            pc[q]++;
                        } else {
                            links.computeIfAbsent(p + ">" + a.peer(), k -> new ArrayDeque<>()).add(msg);
                        }
                        pc[p]++;
                    } else {
                        if (synchronous) {
                            break;
                        }
                        ArrayDeque<Message> link = links.get(a.peer() + ">" + p);
                        if (link == null || link.isEmpty()) {
                            break;
                        }
                        assertEquals(new Message(a.kind(), a.chunk(), a.microBatch()), link.poll(),
                                plan + " buffered: stage " + p + " receives the wrong message from " + a.peer());
                        pc[p]++;
                    }
                    progress = true;
                }
                finished &= pc[p] == actions.size();
            }
            if (finished) {
                for (Map.Entry<String, ArrayDeque<Message>> e : links.entrySet()) {
                    assertTrue(e.getValue().isEmpty(), plan + ": messages never received on " + e.getKey());
                }
                return;
            }
            if (!progress) {
                StringBuilder where = new StringBuilder();
                for (int p = 0; p < n; p++) {
                    where.append(" stage ").append(p).append(" at ")
                            .append(pc[p] < plan.actions(p).size() ? plan.actions(p).get(pc[p]) : "end");
                }
                fail(plan + (synchronous ? " deadlocks with a synchronous transport:" : " deadlocks:") + where);
            }
        }
    }

    /** A send as the receiver names it: its chunk on the receiving stage. */
    private static Message asReceived(ScheduleTable t, int stage, StageAction send) {
        int last = t.pipelineSize() - 1;
        if (send.kind() == StageAction.Kind.SEND_ACTIVATION) {
            int chunk = stage == last ? send.chunk() + 1 : send.chunk();
            assertEquals((stage + 1) % t.pipelineSize(), send.peer());
            return new Message(StageAction.Kind.RECEIVE_ACTIVATION, chunk, send.microBatch());
        }
        int chunk = stage == 0 ? send.chunk() - 1 : send.chunk();
        assertEquals((stage - 1 + t.pipelineSize()) % t.pipelineSize(), send.peer());
        return new Message(StageAction.Kind.RECEIVE_GRADIENT, chunk, send.microBatch());
    }
}
