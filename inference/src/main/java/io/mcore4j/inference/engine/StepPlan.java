package io.mcore4j.inference.engine;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import io.mcore4j.parallel.Communicator;

/**
 * What one pass of the engine runs, the same on every tensor-parallel rank: {@code b} sequences of {@code s} tokens
 * each, their positions and block tables. Tensor-parallel rank 0 schedules and {@link #broadcast broadcasts} each
 * plan; the other ranks run what they receive, so every rank runs the same passes in the same order.
 *
 * @param kind {@link #STOP}, {@link #PASS} (an eager pass: prefill chunks), {@link #DECODE} (one token per
 *     sequence, padded to the decode bucket {@code b}) or {@link #ADVANCE} (bucket {@code b}'s decode step again, on
 *     the inputs its last step left on the device: no tokens, positions or tables)
 * @param b sequences (the bucket, for a decode)
 * @param s tokens per sequence
 * @param width blocks per sequence's table
 * @param tokens [s * b] token ids, sequence axis first
 * @param positions [b * s] each token's position, sequence by sequence
 * @param tables [b * width] block tables, row by row
 */
record StepPlan(int kind, int b, int s, int width, long[] tokens, long[] positions, long[] tables) {
    static final int STOP = 0;
    static final int PASS = 1;
    static final int DECODE = 2;
    static final int ADVANCE = 3;

    /** The plan that runs bucket {@code b}'s decode step on the inputs its last step left. */
    static StepPlan advance(int b) {
        return new StepPlan(ADVANCE, b, 0, 0, new long[0], new long[0], new long[0]);
    }

    /** The plan that ends the followers' loops. */
    static StepPlan stop() {
        return new StepPlan(STOP, 0, 0, 0, new long[0], new long[0], new long[0]);
    }

    /**
     * Sends the plan from tensor-parallel rank 0 (this plan) or receives it (others: the argument is ignored).
     * A collective over {@code tp}.
     *
     * @param plan the plan on rank 0, null elsewhere
     * @param tp the tensor-parallel group
     * @param manager owner of the temporaries (on the device the group communicates on)
     * @return the plan, on every rank
     */
    static StepPlan broadcast(StepPlan plan, Communicator tp, NDManager manager) {
        if (tp.size() == 1) {
            return plan;
        }
        try (NDManager temporaries = manager.newSubManager()) {
            boolean root = tp.rank() == 0;
            long[] header = root ? new long[] {plan.kind, plan.b, plan.s, plan.width} : new long[4];
            long[] h = received(tp, temporaries, header);
            int kind = (int) h[0];
            int b = (int) h[1];
            int s = (int) h[2];
            int width = (int) h[3];
            if (kind == STOP) {
                return stop();
            }
            if (kind == ADVANCE) {
                return advance(b);
            }
            long[] body = new long[2 * s * b + b * width];
            if (root) {
                System.arraycopy(plan.tokens, 0, body, 0, s * b);
                System.arraycopy(plan.positions, 0, body, s * b, s * b);
                System.arraycopy(plan.tables, 0, body, 2 * s * b, b * width);
            }
            long[] all = received(tp, temporaries, body);
            return new StepPlan(kind, b, s, width, java.util.Arrays.copyOfRange(all, 0, s * b),
                    java.util.Arrays.copyOfRange(all, s * b, 2 * s * b), java.util.Arrays.copyOfRange(all, 2 * s * b, all.length));
        }
    }

    private static long[] received(Communicator tp, NDManager m, long[] values) {
        NDArray sent = m.create(values);
        return tp.broadcast(sent, 0, m).toLongArray();
    }
}
