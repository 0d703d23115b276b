package io.mcore4j.pipeline;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.Tensors;
import io.mcore4j.parallel.CommunicationException;
import io.mcore4j.parallel.Communicator;

import java.util.function.Supplier;

/**
 * Point-to-point transfers between adjacent pipeline stages over the pipeline-parallel group:
 * activations forward to the next stage, gradients backward to the previous one. Stages are the
 * group-local ranks of the communicator; the pipeline wraps around (the next stage of the last is
 * the first, as interleaving needs: the last rank's chunk {@code c} feeds rank 0's chunk {@code c+1}).
 *
 * <p><b>Shapes.</b> Activations have the configured shape and dtype; when variable sequence lengths
 * are enabled each activation is preceded by an int64 message holding its shape. A gradient has the
 * shape of the activation it belongs to, which its receiver sent itself, so gradients are never
 * preceded by shapes.
 *
 * <p><b>Combined transfers and deadlock.</b> {@link #sendForwardRecvBackward} (send this stage's
 * output, receive its gradient, with the next stage) and its mirror {@link #sendBackwardRecvForward}
 * (send an input gradient, receive the next input, with the previous stage) are called as a pair by
 * neighbours in a lock-step 1F1B schedule. Both move the activation first: the forward sender
 * sends then receives, the backward sender receives then sends. With a buffered transport, where
 * {@code send} returns at once, the activation is posted before either side blocks. With a
 * synchronous transport, where {@code send} waits until the peer enters the matching {@code recv},
 * the first send of one side meets the first receive of the other, and then the reverse. Posting
 * sends first on both sides would be safe only while sends never block: two neighbours each blocked
 * in a send to the other never reach their receives. {@link Schedules} does not rely on these pairs:
 * it executes a {@link StagePlan}, whose transfers follow one global order and so are safe under
 * either transport.
 *
 * <p><b>Failures.</b> A {@link CommunicationException} from the communicator (a stalled neighbour
 * times out) is rethrown with a message naming this stage, the peer and what was being transferred.
 * Received tensors are owned by the manager passed in. Not thread-safe: one thread per stage, like
 * the communicator.
 */
public final class P2pCommunication {
    private final Communicator pp;
    private final Shape tensorShape;
    private final DataType dtype;
    private final boolean variableSeqLengths;

    /**
     * @param pp the pipeline-parallel communicator (this stage is its group rank)
     * @param tensorShape shape of the activations (only its number of dims with variable lengths)
     * @param dtype dtype of activations and gradients
     * @param variableSeqLengths whether each activation is preceded by its shape
     */
    public P2pCommunication(Communicator pp, Shape tensorShape, DataType dtype, boolean variableSeqLengths) {
        if (pp == null || tensorShape == null || dtype == null) {
            throw new IllegalArgumentException("communicator, tensor shape and dtype must not be null");
        }
        this.pp = pp;
        this.tensorShape = tensorShape;
        this.dtype = dtype;
        this.variableSeqLengths = variableSeqLengths;
    }

    /**
     * Transfers shaped as a schedule config says.
     *
     * @param pp the pipeline-parallel communicator
     * @param config supplies the tensor shape, dtype and variable-length flag
     * @return the transfers
     */
    public static P2pCommunication of(Communicator pp, ScheduleConfig config) {
        return new P2pCommunication(pp, config.tensorShape(), config.dtype(), config.variableSeqLengths());
    }

    /** @return this stage: the rank in the pipeline group */
    public int stage() {
        return pp.rank();
    }

    /** @return number of stages: the pipeline group size */
    public int stages() {
        return pp.size();
    }

    /** @return the stage activations are sent to (wrapping around) */
    public int nextStage() {
        return (stage() + 1) % stages();
    }

    /** @return the stage activations come from (wrapping around) */
    public int previousStage() {
        return (stage() - 1 + stages()) % stages();
    }

    /**
     * Sends an output activation to the next stage.
     *
     * @param output the activation, of the configured shape (number of dims with variable lengths) and dtype
     */
    public void sendForward(NDArray output) {
        sendActivation(output, nextStage(), null);
    }

    /**
     * Receives an input activation from the previous stage.
     *
     * @param owner manager that owns the result
     * @return the activation (not requiring grad; the caller decides)
     */
    public NDArray recvForward(NDManager owner) {
        return recvActivation(previousStage(), owner, null);
    }

    /**
     * Sends the gradient of this stage's input to the previous stage.
     *
     * @param inputGrad the gradient, shaped like the input activation
     */
    public void sendBackward(NDArray inputGrad) {
        sendGradient(inputGrad, previousStage(), null);
    }

    /**
     * Receives the gradient of this stage's output from the next stage.
     *
     * @param shape the shape of the output it belongs to
     * @param owner manager that owns the result
     * @return the gradient
     */
    public NDArray recvBackward(Shape shape, NDManager owner) {
        return recvGradient(shape, nextStage(), owner, null);
    }

    /**
     * Sends {@code output} to the next stage, then receives its gradient from there; pairs with the
     * next stage's {@link #sendBackwardRecvForward}. See the class comment for the order.
     *
     * @param output this stage's output activation
     * @param owner manager that owns the gradient
     * @return the gradient of {@code output}
     */
    public NDArray sendForwardRecvBackward(NDArray output, NDManager owner) {
        sendForward(output);
        return recvBackward(output.getShape(), owner);
    }

    /**
     * Receives the next input activation from the previous stage, then sends {@code inputGrad}
     * there; pairs with the previous stage's {@link #sendForwardRecvBackward}. See the class comment
     * for why this side receives first.
     *
     * @param inputGrad the gradient of this stage's previous input
     * @param owner manager that owns the received activation
     * @return the next input activation
     */
    public NDArray sendBackwardRecvForward(NDArray inputGrad, NDManager owner) {
        NDArray input = recvForward(owner);
        sendBackward(inputGrad);
        return input;
    }

    void sendActivation(NDArray output, int peer, String subject) {
        checkActivation(output, subject);
        String what = "sending an activation " + Tensors.describe(output.getShape()) + " to stage " + peer;
        run(subject, what, () -> {
            if (variableSeqLengths) {
                try (NDManager temp = output.getManager().newSubManager()) {
                    pp.send(temp.create(output.getShape().getShape()), peer);
                }
            }
            pp.send(output, peer);
            return null;
        });
    }

    NDArray recvActivation(int peer, NDManager owner, String subject) {
        String what = "receiving an activation from stage " + peer;
        return run(subject, what, () -> {
            Shape shape = tensorShape;
            if (variableSeqLengths) {
                try (NDManager temp = owner.newSubManager()) {
                    long[] dims = pp.recv(new Shape(tensorShape.dimension()), DataType.INT64, peer, temp).toLongArray();
                    shape = new Shape(dims);
                }
            }
            return pp.recv(shape, dtype, peer, owner);
        });
    }

    void sendGradient(NDArray inputGrad, int peer, String subject) {
        DataType gradType = DataTypes.of(inputGrad);
        if (gradType != dtype) {
            throw new IllegalArgumentException(prefix(subject) + "an input gradient of dtype " + gradType
                    + " cannot be sent: the pipeline transfers " + dtype);
        }
        String what = "sending a gradient " + Tensors.describe(inputGrad.getShape()) + " to stage " + peer;
        run(subject, what, () -> {
            pp.send(inputGrad, peer);
            return null;
        });
    }

    NDArray recvGradient(Shape shape, int peer, NDManager owner, String subject) {
        String what = "receiving a gradient " + Tensors.describe(shape) + " from stage " + peer;
        return run(subject, what, () -> pp.recv(shape, dtype, peer, owner));
    }

    private void checkActivation(NDArray output, String subject) {
        Shape shape = output.getShape();
        boolean shapeOk = variableSeqLengths ? shape.dimension() == tensorShape.dimension() : shape.equals(tensorShape);
        DataType outputType = DataTypes.of(output);
        if (!shapeOk || outputType != dtype) {
            throw new IllegalArgumentException(prefix(subject) + "the activation to send is " + outputType + " "
                    + Tensors.describe(shape) + " but the pipeline transfers " + dtype + " "
                    + (variableSeqLengths ? "tensors of " + tensorShape.dimension() + " dims" : Tensors.describe(tensorShape))
                    + " (ScheduleConfig.tensorShape and dtype)");
        }
    }

    private <T> T run(String subject, String what, Supplier<T> transfer) {
        try {
            return transfer.get();
        } catch (CommunicationException e) {
            String original = e.getMessage();
            String head = e.group() + " " + e.operation() + ": ";
            if (original != null && original.startsWith(head)) {
                original = original.substring(head.length());
            }
            throw new CommunicationException(e.group(), e.operation(), e.ranks(),
                    prefix(subject) + what + " failed: " + original, e);
        }
    }

    private String prefix(String subject) {
        return "pipeline stage " + stage() + " of " + stages() + (subject == null ? "" : " (" + subject + ")") + ": ";
    }
}
