package io.mcore4j.training;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.kernel.GraphCapture;
import io.mcore4j.pipeline.ScheduleResult;

import java.util.ArrayList;
import java.util.List;
import java.util.function.Function;

/**
 * A step's forward-backward schedule replayed from a CUDA graph ({@link CudaGraphConfig}): the second
 * implementation of {@link TrainStep}'s schedule, which chooses it. The first
 * {@link CudaGraphConfig#warmupSteps()} steps run the schedule eagerly. The next copies its micro-batches
 * into tensors of the graph's own (its inputs) and captures a body that clears every gradient (host work
 * only, so that the graph makes each {@code .grad} itself), runs the schedule over the inputs and leaves
 * the losses in the graph's output; then it replays the graph; every later step copies its
 * micro-batches into the inputs and replays. A changed loss scale (fp16's dynamic scaler) is part of the
 * captured work, so it closes the graph and captures again.
 *
 * <p>Between replays the gradients are left as the graph made them: each replay writes them afresh
 * (the first micro-batch's gradient becomes {@code .grad}, the later ones add to it), so the step must
 * not clear them ({@link #ownsGradients()}). The weights are read from their storage by every replay, so
 * the optimizer must update them in place, as it does.
 */
final class ScheduleGraph implements AutoCloseable {
    private final GraphCapture capture;
    private final CudaGraphConfig config;
    private final NDManager manager;
    private final Runnable prepare;
    private int eagerSteps;
    private GraphCapture.CapturedGraph graph;
    private double capturedScale = Double.NaN;
    private int capturedPeak;
    private NDManager captured;
    private List<MicroBatch> inputs;
    private NDArray losses;

    /**
     * @param capture the device's graph support
     * @param config the warm-up
     * @param manager parent of the graph's inputs and outputs (the step's device)
     * @param prepare run before every capture, at the same point on every rank (the communicators' set-up for it)
     */
    ScheduleGraph(GraphCapture capture, CudaGraphConfig config, NDManager manager, Runnable prepare) {
        this.capture = capture;
        this.config = config;
        this.manager = manager.newSubManager();
        this.prepare = prepare;
    }

    /**
     * Runs one step's schedule: eagerly during the warm-up, else by replaying the graph (captured first
     * when there is none yet or the loss scale changed).
     *
     * @param batches this step's micro-batches
     * @param scale the loss scale the schedule multiplies the loss by
     * @param schedule runs the schedule over the given micro-batches (eagerly, or under capture)
     * @param clearGradients sets every gradient to none (before a capture, and first in the captured body)
     * @param finish what the captured body does after the schedule (the gradients' synchronisation, where the
     *               graph holds it); not run on eager steps
     * @param owner the manager that owns the returned device losses
     * @return the schedule's result; its device losses are owned by {@code owner}
     */
    ScheduleResult run(List<MicroBatch> batches, double scale, Function<List<MicroBatch>, ScheduleResult> schedule,
                       Runnable clearGradients, Runnable finish, NDManager owner) {
        for (int mb = 0; mb < batches.size(); mb++) {
            if (batches.get(mb).packed() != null) {
                // the attention masks and kernel arguments of packed sequences are host data of each micro-batch
                throw new IllegalStateException("micro-batch " + mb + " packs several sequences into a column; a CUDA graph"
                        + " replays one fixed attention: run packed data without --cuda-graph-impl local");
            }
        }
        if (eagerSteps < config.warmupSteps()) {
            eagerSteps++;
            return schedule.apply(batches);
        }
        if (graph == null || scale != capturedScale) {
            capture(batches, scale, schedule, clearGradients, finish);
        }
        for (int mb = 0; mb < batches.size(); mb++) {
            copy(inputs.get(mb), batches.get(mb), mb);
        }
        graph.replay();
        NDArray out = null;
        if (losses != null) {
            out = losses.duplicate();
            out.attach(owner);
        }
        return new ScheduleResult(new float[0], capturedPeak, out);
    }

    /**
     * Whether the step's gradients are the graph's: true once a graph is captured; the step must then
     * leave them in place instead of clearing them.
     *
     * @return whether a graph makes the gradients
     */
    boolean ownsGradients() {
        return graph != null;
    }

    private void capture(List<MicroBatch> batches, double scale, Function<List<MicroBatch>, ScheduleResult> schedule,
                         Runnable clearGradients, Runnable finish) {
        release();
        clearGradients.run(); // the step's buffers go before the capture; the body's clearing is host work only
        captured = manager.newSubManager();
        inputs = new ArrayList<>(batches.size());
        for (MicroBatch b : batches) {
            inputs.add(new MicroBatch(copyOf(b.tokens()), copyOf(b.labels()), copyOf(b.lossMask()), copyOf(b.positionIds()), null));
        }
        prepare.run();
        capture.releaseCachedMemory();
        // the body is what a replay repeats: gradients cleared (no device work: the graph's first micro-batch
        // makes each .grad), the schedule over the inputs, what finishes it, its losses into the graph's output
        try {
            graph = capture.capture(() -> {
                clearGradients.run();
                ScheduleResult r = schedule.apply(inputs);
                finish.run();
                capturedPeak = r.peakLiveMicroBatches();
                NDArray out = r.deviceLosses();
                if (out != null && losses == null) {
                    losses = out;
                    losses.attach(captured);
                } else if (out != null) {
                    Tensors.copyInto(losses, out);
                    out.close();
                }
            });
        } catch (IllegalStateException e) {
            release();
            throw new IllegalStateException("capturing the step's forward and backward into a CUDA graph failed: "
                    + e.getMessage() + " (run without --cuda-graph-impl local, or report the step's layout)", e);
        }
        capturedScale = scale;
    }

    private NDArray copyOf(NDArray t) {
        if (t == null) {
            return null;
        }
        NDArray c = t.duplicate();
        c.attach(captured);
        return c;
    }

    private static void copy(MicroBatch into, MicroBatch from, int mb) {
        copy(into.tokens(), from.tokens(), "tokens", mb);
        copy(into.labels(), from.labels(), "labels", mb);
        copy(into.lossMask(), from.lossMask(), "loss mask", mb);
        copy(into.positionIds(), from.positionIds(), "position ids", mb);
    }

    private static void copy(NDArray into, NDArray from, String what, int mb) {
        if ((into == null) != (from == null)) {
            throw new IllegalStateException("micro-batch " + mb + ": the CUDA graph was captured " + (into == null
                    ? "without" : "with") + " " + what + ", this step has " + (from == null ? "none" : "them"));
        }
        if (into == null || into == from) {
            return;
        }
        if (!into.getShape().equals(from.getShape())) {
            throw new IllegalStateException("micro-batch " + mb + ": " + what + " " + Tensors.describe(from.getShape())
                    + " differ from the " + Tensors.describe(into.getShape()) + " the CUDA graph was captured with"
                    + " (a graph replays fixed shapes)");
        }
        Tensors.copyInto(into, from);
    }

    private void release() {
        if (graph != null) {
            graph.close();
            graph = null;
        }
        if (captured != null) {
            captured.close();
            captured = null;
        }
        inputs = null;
        losses = null;
    }

    @Override
    public void close() {
        release();
        manager.close();
    }
}
