package io.mcore4j.pipeline;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDArrays;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.autograd.GradMode;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;

/**
 * Executes one stage's {@link StagePlan}: opens a scope per (chunk, micro-batch) when its activation
 * arrives (or at its forward on the first stage's first chunk), runs the user's forward step,
 * back-propagates, hands activations and gradients to {@link P2pCommunication}, and closes every
 * scope after its backward (forward-only: after its forward and its output's send).
 *
 * <p>An input gradient leaves its scope when the backward is done: it is fetched into an outbox
 * manager that the run owns, and closed once sent, so scopes close as early as the schedule says.
 * Whatever happens, every scope and the outbox are closed when {@link #run} returns or throws, and
 * the thread's grad mode is restored.
 */
final class ScheduleRun {
    private final ForwardStep step;
    private final P2pCommunication p2p;
    private final NDManager manager;
    private final ScheduleConfig config;
    private final StagePlan plan;
    private final int stage;
    private final int chunks;
    private final boolean lastStage;

    private final AutogradScope[][] scopes;
    private final NDArray[][] inputs;
    private final NDArray[][] outputs;
    private final NDArray[][] outputGrads;
    private final NDArray[][] inputGrads;
    private final boolean[][] unsent;
    private final float[] losses;
    private final NDArray[] lossTensors;
    private int live;
    private int peak;

    ScheduleRun(ForwardStep step, P2pCommunication p2p, NDManager manager, ScheduleConfig config, StagePlan plan) {
        this.step = step;
        this.p2p = p2p;
        this.manager = manager;
        this.config = config;
        this.plan = plan;
        this.stage = p2p.stage();
        this.chunks = plan.table().virtualSize();
        this.lastStage = stage == p2p.stages() - 1;
        int m = config.numMicrobatches();
        this.scopes = new AutogradScope[chunks][m];
        this.inputs = new NDArray[chunks][m];
        this.outputs = new NDArray[chunks][m];
        this.outputGrads = new NDArray[chunks][m];
        this.inputGrads = new NDArray[chunks][m];
        this.unsent = new boolean[chunks][m];
        this.losses = new float[lastStage ? m : 0];
        this.lossTensors = new NDArray[lastStage ? m : 0];
    }

    ScheduleResult run() {
        boolean gradMode = GradMode.isEnabled();
        NDArray deviceLosses = null;
        try (NDManager outbox = manager.newSubManager()) {
            Throwable failure = null;
            try {
                for (StageAction a : plan.actions(stage)) {
                    execute(a, outbox);
                }
                if (config.lossesOnDevice()) {
                    deviceLosses = keepLosses();
                } else {
                    readLosses();
                }
            } catch (RuntimeException | Error e) {
                failure = e;
                throw e;
            } finally {
                closeAll(failure);
            }
        } finally {
            GradMode.set(gradMode);
        }
        return new ScheduleResult(deviceLosses != null ? new float[0] : losses, peak, deviceLosses);
    }

    private void execute(StageAction a, NDManager outbox) {
        int c = a.chunk();
        int m = a.microBatch();
        switch (a.kind()) {
            case RECEIVE_ACTIVATION -> {
                AutogradScope scope = scope(c, m);
                NDArray input = p2p.recvActivation(a.peer(), scope.manager(), subject(c, m));
                if (!config.forwardOnly()) {
                    input.setRequiresGradient(true);
                }
                inputs[c][m] = input;
            }
            case FORWARD -> forward(c, m, outbox);
            case SEND_ACTIVATION -> {
                NDArray out = outputs[c][m];
                p2p.sendActivation(out, a.peer(), subject(c, m));
                unsent[c][m] = false;
                if (config.forwardOnly()) {
                    outputs[c][m] = null;
                    out.close();
                }
            }
            case RECEIVE_GRADIENT -> outputGrads[c][m] =
                    p2p.recvGradient(outputs[c][m].getShape(), a.peer(), scopes[c][m].manager(), subject(c, m));
            case BACKWARD -> backward(c, m, outbox);
            case SEND_GRADIENT -> {
                NDArray grad = inputGrads[c][m];
                inputGrads[c][m] = null;
                try {
                    p2p.sendGradient(grad, a.peer(), subject(c, m));
                } finally {
                    grad.close();
                }
            }
        }
    }

    private void forward(int c, int m, NDManager outbox) {
        AutogradScope scope = scope(c, m);
        GradMode.set(scope.isGradEnabled());
        NDArray out = step.forward(scope, c, m, inputs[c][m]);
        if (out == null) {
            throw new IllegalStateException(subject(c, m) + " on pipeline stage " + stage + ": the forward step returned null");
        }
        if (lastStage && c == chunks - 1) {
            if (out.getShape().size() != 1) {
                throw new IllegalStateException(subject(c, m) + " on the last pipeline stage " + stage
                        + ": the forward step must return a scalar loss, got shape " + Tensors.describe(out.getShape()));
            }
            // kept on the device and read once after the run: reading here would stall the host per micro-batch
            NDArray kept = Tensors.detach(out, outbox).toType(DataType.FLOAT32, true).reshape(1);
            kept.attach(outbox);
            lossTensors[m] = kept;
            if (!config.forwardOnly()) {
                GradMode.set(true);
                NDArray scaled = Tensors.scale(out, 1.0 / config.numMicrobatches(), scope.manager());
                scaled.attach(scope.manager());
                outputs[c][m] = scaled;
            }
        } else if (config.forwardOnly()) {
            // keep only the output (a handle to its storage) so the rest of the pass is freed now
            outputs[c][m] = Tensors.detach(out, outbox);
            unsent[c][m] = true;
        } else {
            outputs[c][m] = out;
            unsent[c][m] = true;
        }
        if (config.forwardOnly()) {
            inputs[c][m] = null;
            close(c, m);
        }
    }

    private void backward(int c, int m, NDManager outbox) {
        AutogradScope scope = scopes[c][m];
        NDArray out = outputs[c][m];
        if (lastStage && c == chunks - 1) {
            scope.backward(out);
        } else if (Tensors.requiresGrad(out)) {
            scope.backward(new NDArray[] {out}, new NDArray[] {outputGrads[c][m]});
        }
        NDArray input = inputs[c][m];
        if (input != null) {
            // an input the output does not depend on gets no .grad: its gradient is zero
            inputGrads[c][m] = Tensors.gradientOrZeros(input, outbox);
        }
        outputs[c][m] = null;
        outputGrads[c][m] = null;
        inputs[c][m] = null;
        close(c, m);
    }

    private AutogradScope scope(int c, int m) {
        AutogradScope scope = scopes[c][m];
        if (scope == null) {
            scope = config.forwardOnly() ? AutogradScope.openNoGrad(manager) : AutogradScope.open(manager);
            scopes[c][m] = scope;
            peak = Math.max(peak, ++live);
        }
        return scope;
    }

    private void close(int c, int m) {
        if (unsent[c][m] && !config.forwardOnly()) {
            throw new IllegalStateException(subject(c, m) + " on pipeline stage " + stage
                    + ": the scope would close before the output activation was sent (plan defect)");
        }
        AutogradScope scope = scopes[c][m];
        scopes[c][m] = null;
        live--;
        scope.close();
    }

    /** Closes every scope still open; close failures join {@code primary}, or are thrown when there is none. */
    private void closeAll(Throwable primary) {
        RuntimeException first = null;
        for (int c = 0; c < chunks; c++) {
            for (int m = 0; m < scopes[c].length; m++) {
                if (scopes[c][m] != null) {
                    try {
                        scopes[c][m].close();
                    } catch (RuntimeException e) {
                        if (primary != null) {
                            primary.addSuppressed(e);
                        } else if (first == null) {
                            first = e;
                        }
                    }
                    scopes[c][m] = null;
                    live--;
                }
            }
        }
        if (first != null) {
            throw first;
        }
    }

    /** All micro-batch losses in one tensor owned by the run's manager, left on the device; null off the last stage. */
    private NDArray keepLosses() {
        if (lossTensors.length == 0) {
            return null;
        }
        NDArray all = NDArrays.concat(new NDList(lossTensors), 0);
        all.attach(manager);
        return all;
    }

    /** One device-to-host transfer for all micro-batch losses. */
    private void readLosses() {
        if (lossTensors.length == 0) {
            return;
        }
        NDArray all = NDArrays.concat(new NDList(lossTensors), 0);
        float[] values = all.toFloatArray();
        all.close();
        System.arraycopy(values, 0, losses, 0, values.length);
    }

    private String subject(int c, int m) {
        return chunks > 1 ? "chunk " + c + ", micro-batch " + m : "micro-batch " + m;
    }
}
