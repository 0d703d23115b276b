package io.mcore4j.pipeline;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/**
 * The pure arithmetic of the forward-backward schedules, free of communication: how many forward
 * passes each stage runs before its first backward (warmup), and in which order a stage visits
 * (chunk, micro-batch) pairs forward and backward.
 *
 * <p><b>Order.</b> With {@code V} model chunks per rank and micro-batch group size {@code G}, the
 * {@code M * V} virtual micro-batches are visited group by group: micro-batches {@code [g, g+G)} on
 * chunk 0, then the same micro-batches on chunk 1, ..., chunk {@code V-1}, then the next group; the
 * last group holds the {@code M mod G} remaining micro-batches when {@code G} does not divide
 * {@code M}. So with {@code M = 5, G = 3, V = 2} the forward order is micro-batches
 * {@code 0 1 2 0 1 2 3 4 3 4} on chunks
 * {@code 0 0 0 1 1 1 0 0 1 1} (Megatron-Core's grouped table). The {@code k}-th backward visits the
 * micro-batch of the {@code k}-th forward on the mirrored chunk {@code V - 1 - chunk}. Every rank of the
 * pipeline uses the same order; without interleaving ({@code V = 1}) it is simply {@code 0 .. M-1}.
 *
 * <p><b>Warmup.</b> Non-interleaved 1F1B: {@code min(P - rank - 1, M)}. Interleaved:
 * {@code 2 (P - rank - 1) + (V - 1) G}, capped at {@code M V}. Forward-only runs are all warmup.
 * After the warmup a stage alternates one forward and one backward (steady state), then runs the
 * remaining {@code warmup} backwards (cooldown). With {@code P = 1} (no pipelining) the warmup is 0:
 * each micro-batch's forward is followed by its backward.
 *
 * <p><b>Validity</b> (interleaving only): {@code P <= G <= M}, and {@code M mod G} is 0 or at least
 * {@code P}, otherwise the last group starves the pipeline. Immutable and thread-safe.
 */
public final class ScheduleTable {
    private final int pipelineSize;
    private final int virtualSize;
    private final int numMicrobatches;
    private final int groupSize;
    private final List<VirtualMicroBatch> forwardOrder;
    private final List<VirtualMicroBatch> backwardOrder;

    private ScheduleTable(int pipelineSize, int virtualSize, int numMicrobatches, int groupSize) {
        this.pipelineSize = pipelineSize;
        this.virtualSize = virtualSize;
        this.numMicrobatches = numMicrobatches;
        this.groupSize = groupSize;
        List<VirtualMicroBatch> fwd = new ArrayList<>(numMicrobatches * virtualSize);
        for (int first = 0; first < numMicrobatches; first += groupSize) {
            int end = first + groupSize >= numMicrobatches ? numMicrobatches : first + groupSize;
            for (int chunk = 0; chunk < virtualSize; chunk++) {
                for (int mb = first; mb < end; mb++) {
                    fwd.add(new VirtualMicroBatch(chunk, mb));
                }
            }
            if (end == numMicrobatches) {
                break;
            }
        }
        List<VirtualMicroBatch> bwd = new ArrayList<>(fwd.size());
        for (VirtualMicroBatch f : fwd) {
            bwd.add(new VirtualMicroBatch(virtualSize - 1 - f.chunk(), f.microBatch()));
        }
        this.forwardOrder = Collections.unmodifiableList(fwd);
        this.backwardOrder = Collections.unmodifiableList(bwd);
    }

    /**
     * The table of a pipeline of {@code pipelineSize} ranks with {@code virtualSize} model chunks each.
     *
     * @param pipelineSize number of pipeline stages (ranks), at least 1
     * @param virtualSize model chunks per rank, at least 1; above 1 needs {@code pipelineSize > 1}
     * @param numMicrobatches micro-batches per step, at least 1
     * @param groupSize micro-batches per group when interleaving; 0 means {@code pipelineSize};
     *                  ignored without interleaving
     * @return the table
     * @throws IllegalArgumentException naming the rule that failed and the numbers
     */
    public static ScheduleTable of(int pipelineSize, int virtualSize, int numMicrobatches, int groupSize) {
        if (pipelineSize < 1) {
            throw new IllegalArgumentException("pipeline size must be at least 1, got " + pipelineSize);
        }
        if (virtualSize < 1) {
            throw new IllegalArgumentException("number of model chunks must be at least 1, got " + virtualSize);
        }
        if (numMicrobatches < 1) {
            throw new IllegalArgumentException("number of micro-batches must be at least 1, got " + numMicrobatches);
        }
        if (groupSize < 0) {
            throw new IllegalArgumentException("micro-batch group size must be >= 0 (0 = pipeline size), got " + groupSize);
        }
        if (virtualSize == 1) {
            return new ScheduleTable(pipelineSize, 1, numMicrobatches, numMicrobatches);
        }
        if (pipelineSize == 1) {
            throw new IllegalArgumentException(virtualSize + " model chunks per rank (interleaving) need a pipeline"
                    + " size above 1, got 1");
        }
        int g = groupSize == 0 ? pipelineSize : groupSize;
        String which = groupSize == 0 ? "micro-batch group size " + g + " (default: the pipeline size)"
                : "micro-batch group size " + g;
        if (g < pipelineSize) {
            throw new IllegalArgumentException(which + " is smaller than the pipeline size " + pipelineSize
                    + "; interleaving needs pipeline size <= group size <= number of micro-batches");
        }
        if (g > numMicrobatches) {
            throw new IllegalArgumentException(which + " exceeds the number of micro-batches " + numMicrobatches
                    + "; interleaving needs pipeline size " + pipelineSize + " <= group size <= number of micro-batches");
        }
        int last = numMicrobatches % g;
        if (last != 0 && last < pipelineSize) {
            throw new IllegalArgumentException(numMicrobatches + " micro-batches leave a last group of " + numMicrobatches
                    + " mod " + g + " = " + last + " with " + which + "; the remainder must be 0 or at least the"
                    + " pipeline size " + pipelineSize + ", otherwise the pipeline stalls in the last group");
        }
        return new ScheduleTable(pipelineSize, virtualSize, numMicrobatches, g);
    }

    /**
     * A non-interleaved table (one chunk per rank).
     *
     * @param pipelineSize number of stages
     * @param numMicrobatches micro-batches per step
     * @return the table
     */
    public static ScheduleTable nonInterleaved(int pipelineSize, int numMicrobatches) {
        return of(pipelineSize, 1, numMicrobatches, 0);
    }

    /** @return number of pipeline stages */
    public int pipelineSize() {
        return pipelineSize;
    }

    /** @return model chunks per rank (1 without interleaving) */
    public int virtualSize() {
        return virtualSize;
    }

    /** @return micro-batches per step */
    public int numMicrobatches() {
        return numMicrobatches;
    }

    /** @return the effective micro-batch group size ({@code numMicrobatches} without interleaving) */
    public int groupSize() {
        return groupSize;
    }

    /** @return forward passes per stage per step: {@code numMicrobatches * virtualSize} */
    public int totalVirtualMicroBatches() {
        return numMicrobatches * virtualSize;
    }

    /** @return whether there is more than one chunk per rank */
    public boolean isInterleaved() {
        return virtualSize > 1;
    }

    /**
     * Forward passes pipeline rank {@code rank} runs before its first backward when training.
     *
     * @param rank the pipeline rank
     * @return the warmup count, at most {@link #totalVirtualMicroBatches()}
     */
    public int warmup(int rank) {
        return warmup(rank, false);
    }

    /**
     * Forward passes pipeline rank {@code rank} runs before its first backward.
     *
     * @param rank the pipeline rank
     * @param forwardOnly whether the run has no backward (then every forward is warmup)
     * @return the warmup count
     */
    public int warmup(int rank, boolean forwardOnly) {
        checkRank(rank);
        int total = totalVirtualMicroBatches();
        if (forwardOnly) {
            return total;
        }
        long w = virtualSize == 1
                ? pipelineSize - rank - 1
                : 2L * (pipelineSize - rank - 1) + (long) (virtualSize - 1) * groupSize;
        return (int) Math.min(w, total);
    }

    /**
     * Training warmup of every rank.
     *
     * @return entry {@code r} is {@link #warmup(int) warmup(r)}
     */
    public int[] warmups() {
        int[] w = new int[pipelineSize];
        for (int r = 0; r < pipelineSize; r++) {
            w[r] = warmup(r);
        }
        return w;
    }

    /**
     * The {@code k}-th forward of every stage.
     *
     * @param k in {@code [0, totalVirtualMicroBatches())}
     * @return its chunk and micro-batch
     */
    public VirtualMicroBatch forward(int k) {
        return forwardOrder.get(k);
    }

    /**
     * The {@code k}-th backward of every stage: the micro-batch of the {@code k}-th forward on the
     * mirrored chunk.
     *
     * @param k in {@code [0, totalVirtualMicroBatches())}
     * @return its chunk and micro-batch
     */
    public VirtualMicroBatch backward(int k) {
        return backwardOrder.get(k);
    }

    /** @return the forward order, unmodifiable */
    public List<VirtualMicroBatch> forwardOrder() {
        return forwardOrder;
    }

    /** @return the backward order, unmodifiable */
    public List<VirtualMicroBatch> backwardOrder() {
        return backwardOrder;
    }

    /**
     * The computations of pipeline rank {@code rank} in order: warmup forwards, then alternating one
     * forward and one backward, then the cooldown backwards.
     *
     * @param rank the pipeline rank
     * @param forwardOnly whether to list forwards only
     * @return {@link StageAction.Kind#FORWARD} and {@link StageAction.Kind#BACKWARD} actions
     */
    public List<StageAction> computeOrder(int rank, boolean forwardOnly) {
        int total = totalVirtualMicroBatches();
        int w = warmup(rank, forwardOnly);
        List<StageAction> out = new ArrayList<>(forwardOnly ? total : 2 * total);
        for (int k = 0; k < w; k++) {
            out.add(StageAction.forward(forward(k)));
        }
        if (forwardOnly) {
            return out;
        }
        for (int k = 0; k < total - w; k++) {
            out.add(StageAction.forward(forward(w + k)));
            out.add(StageAction.backward(backward(k)));
        }
        for (int k = total - w; k < total; k++) {
            out.add(StageAction.backward(backward(k)));
        }
        return out;
    }

    private void checkRank(int rank) {
        if (rank < 0 || rank >= pipelineSize) {
            throw new IllegalArgumentException("pipeline rank " + rank + " is outside [0, " + pipelineSize + ")");
        }
    }

    @Override
    public String toString() {
        return "ScheduleTable{pipeline " + pipelineSize + ", chunks " + virtualSize + ", micro-batches "
                + numMicrobatches + ", group " + groupSize + "}";
    }
}
