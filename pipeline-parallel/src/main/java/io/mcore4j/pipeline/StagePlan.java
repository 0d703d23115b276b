package io.mcore4j.pipeline;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.Comparator;
import java.util.List;

/**
 * The exact sequence of computations and transfers every pipeline stage performs in one
 * forward-backward run: a pure function of a {@link ScheduleTable} and the forward-only flag, which
 * every rank computes identically and the schedule then executes step by step.
 *
 * <p><b>Construction.</b> Each stage's computations come from {@link ScheduleTable#computeOrder}.
 * The plan simulates a timeline in which every stage runs its next computation as soon as its input
 * exists, a forward costing 1 and a backward 2 (the usual ratio), and orders all computations by
 * their end. Each data dependency becomes a transfer placed at the later of two moments: the end of
 * the producing computation, and the end of the consumer's computation just before the consuming
 * one. Received data is thus taken when the consumer is about to use it (its micro-batch scope opens
 * then, which keeps 1F1B's bound of warmup + 1 live micro-batches), and sent as soon as the
 * consumer can take it. A stage's plan is the global order restricted to the events it takes part
 * in. The cost model only decides placement, never correctness. When the real costs match it, a
 * run over a buffered transport ends exactly when one that sent every output the moment it exists
 * would (checked by the tests for 2 to 6 stages, 1 to 3 chunks); other ratios cost a few percent.
 *
 * <p><b>Why it cannot deadlock.</b> All plans are restrictions of one total order that respects the
 * data dependencies. Whether {@code send} returns at once (a buffered transport, such as the in-JVM
 * one) or only when the peer has entered the matching {@code recv} (a synchronous transport, such
 * as NCCL kernels queued on one stream without grouping), take the earliest event of that order not
 * yet completed: every earlier event of its participants has completed, so both participants stand
 * at it and it completes. For the same reason both ends of each directed link see messages in the
 * same order. This matters with two stages, where activations wrapping around from the last stage
 * to the first share a link with gradients of the same shape, and no tag tells them apart.
 *
 * <p>Immutable and thread-safe.
 */
public final class StagePlan {
    /** Relative cost of a forward in the simulated timeline that orders transfers. */
    static final long FORWARD_COST = 1;
    /** Relative cost of a backward: twice a forward, the usual ratio. */
    static final long BACKWARD_COST = 2;
    private static final int FWD = 0;
    private static final int BWD = 1;

    private final ScheduleTable table;
    private final boolean forwardOnly;
    private final List<List<StageAction>> actions;

    private StagePlan(ScheduleTable table, boolean forwardOnly, List<List<StageAction>> actions) {
        this.table = table;
        this.forwardOnly = forwardOnly;
        this.actions = actions;
    }

    /**
     * Builds the plan of every stage.
     *
     * @param table the schedule's order and warmup counts
     * @param forwardOnly whether the run has no backward
     * @return the plan
     * @throws IllegalStateException if the computation orders cannot complete (a defect: valid tables always can)
     */
    public static StagePlan of(ScheduleTable table, boolean forwardOnly) {
        int stages = table.pipelineSize();
        int chunks = table.virtualSize();
        int micro = table.numMicrobatches();
        List<List<StageAction>> compute = new ArrayList<>(stages);
        int remaining = 0;
        for (int p = 0; p < stages; p++) {
            compute.add(table.computeOrder(p, forwardOnly));
            remaining += compute.get(p).size();
        }
        // end[stage][fwd|bwd][chunk][micro-batch]: when that computation ends in the simulated timeline
        long[][][][] end = new long[stages][2][chunks][micro];
        for (long[][][] s : end) {
            for (long[][] k : s) {
                for (long[] c : k) {
                    Arrays.fill(c, -1);
                }
            }
        }
        long[] clock = new long[stages];
        int[] next = new int[stages];
        while (remaining > 0) {
            boolean progress = false;
            for (int p = 0; p < stages; p++) {
                while (next[p] < compute.get(p).size()) {
                    StageAction op = compute.get(p).get(next[p]);
                    int[] producer = producer(table, p, op);
                    long ready = producer == null ? 0 : end[producer[0]][producer[1]][producer[2]][op.microBatch()];
                    if (ready < 0) {
                        break;
                    }
                    clock[p] = Math.max(clock[p], ready) + (op.kind() == StageAction.Kind.FORWARD ? FORWARD_COST : BACKWARD_COST);
                    end[p][side(op)][op.chunk()][op.microBatch()] = clock[p];
                    next[p]++;
                    remaining--;
                    progress = true;
                }
            }
            if (!progress) {
                StringBuilder waiting = new StringBuilder();
                for (int p = 0; p < stages; p++) {
                    if (next[p] < compute.get(p).size()) {
                        waiting.append(" stage ").append(p).append(" at ").append(compute.get(p).get(next[p]));
                    }
                }
                throw new IllegalStateException(table + (forwardOnly ? " forward-only" : "")
                        + " cannot make progress:" + waiting);
            }
        }
        // one total order: computations at their end time; a transfer at the later of its producer's
        // end and the end of the consumer's preceding computation, after computations of equal time
        List<Event> events = new ArrayList<>();
        for (int p = 0; p < stages; p++) {
            long previous = 0;
            for (StageAction op : compute.get(p)) {
                long finish = end[p][side(op)][op.chunk()][op.microBatch()];
                events.add(new Event(finish, 0, 0, p, op, -1, -1));
                int[] producer = producer(table, p, op);
                if (producer != null) {
                    long produced = end[producer[0]][producer[1]][producer[2]][op.microBatch()];
                    events.add(new Event(Math.max(produced, previous), 1, finish, p, op, producer[0], producer[2]));
                }
                previous = finish;
            }
        }
        events.sort(Comparator.comparingLong(Event::time).thenComparingInt(Event::order)
                .thenComparingLong(Event::consumerEnd).thenComparingInt(Event::stage));
        List<List<StageAction>> plans = new ArrayList<>(stages);
        for (int p = 0; p < stages; p++) {
            plans.add(new ArrayList<>());
        }
        for (Event e : events) {
            StageAction op = e.op();
            if (e.order() == 0) {
                plans.get(e.stage()).add(op);
            } else if (op.kind() == StageAction.Kind.FORWARD) {
                plans.get(e.peer()).add(new StageAction(StageAction.Kind.SEND_ACTIVATION, e.peerChunk(), op.microBatch(), e.stage()));
                plans.get(e.stage()).add(new StageAction(StageAction.Kind.RECEIVE_ACTIVATION, op.chunk(), op.microBatch(), e.peer()));
            } else {
                plans.get(e.peer()).add(new StageAction(StageAction.Kind.SEND_GRADIENT, e.peerChunk(), op.microBatch(), e.stage()));
                plans.get(e.stage()).add(new StageAction(StageAction.Kind.RECEIVE_GRADIENT, op.chunk(), op.microBatch(), e.peer()));
            }
        }
        List<List<StageAction>> frozen = new ArrayList<>(stages);
        for (List<StageAction> plan : plans) {
            frozen.add(Collections.unmodifiableList(plan));
        }
        return new StagePlan(table, forwardOnly, Collections.unmodifiableList(frozen));
    }

    /**
     * A computation ({@code order 0}) or the transfer feeding computation {@code op} ({@code order 1})
     * in the global order; for transfers {@code peer}/{@code peerChunk} name the producer.
     */
    private record Event(long time, int order, long consumerEnd, int stage, StageAction op, int peer, int peerChunk) {}

    /**
     * The computation whose result {@code op} on {@code stage} consumes from another stage, as
     * {@code {stage, fwd|bwd, chunk}} (same micro-batch), or null when the input is local: the
     * first stage's first chunk reads its data, the last stage's last chunk starts backward from its loss.
     */
    private static int[] producer(ScheduleTable table, int stage, StageAction op) {
        int last = table.pipelineSize() - 1;
        int c = op.chunk();
        if (op.kind() == StageAction.Kind.FORWARD) {
            if (stage == 0) {
                return c == 0 ? null : new int[] {last, FWD, c - 1};
            }
            return new int[] {stage - 1, FWD, c};
        }
        if (stage == last) {
            return c == table.virtualSize() - 1 ? null : new int[] {0, BWD, c + 1};
        }
        return new int[] {stage + 1, BWD, c};
    }

    private static int side(StageAction op) {
        return op.kind() == StageAction.Kind.FORWARD ? FWD : BWD;
    }

    /** @return the table the plan follows */
    public ScheduleTable table() {
        return table;
    }

    /** @return whether the plan has no backward */
    public boolean forwardOnly() {
        return forwardOnly;
    }

    /**
     * The actions of one stage, in execution order.
     *
     * @param stage the pipeline rank
     * @return unmodifiable list
     */
    public List<StageAction> actions(int stage) {
        if (stage < 0 || stage >= table.pipelineSize()) {
            throw new IllegalArgumentException("pipeline rank " + stage + " is outside [0, " + table.pipelineSize() + ")");
        }
        return actions.get(stage);
    }

    /**
     * The most micro-batch scopes a stage holds open at once when it executes its plan: a scope
     * opens at the micro-batch's activation receive (or forward, on the first stage's first chunk)
     * and closes after its backward, or right after its forward when forward-only (an output still
     * to be sent is kept apart from the scope).
     *
     * @param stage the pipeline rank
     * @return the peak count
     */
    public int peakLiveMicroBatches(int stage) {
        boolean[][] open = new boolean[table.virtualSize()][table.numMicrobatches()];
        int live = 0;
        int peak = 0;
        for (StageAction a : actions(stage)) {
            int c = a.chunk();
            int m = a.microBatch();
            if (a.kind() == StageAction.Kind.RECEIVE_ACTIVATION || a.kind() == StageAction.Kind.FORWARD) {
                if (!open[c][m]) {
                    open[c][m] = true;
                    peak = Math.max(peak, ++live);
                }
            }
            boolean closes = forwardOnly ? a.kind() == StageAction.Kind.FORWARD : a.kind() == StageAction.Kind.BACKWARD;
            if (closes) {
                open[c][m] = false;
                live--;
            }
        }
        return peak;
    }

    @Override
    public String toString() {
        return "StagePlan{" + table + (forwardOnly ? ", forward-only" : "") + "}";
    }
}
