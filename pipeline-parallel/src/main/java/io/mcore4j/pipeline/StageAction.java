package io.mcore4j.pipeline;

/**
 * One step of a pipeline stage's plan: a computation (forward or backward of a micro-batch on a
 * chunk) or one transfer to or from a neighbouring stage.
 *
 * @param kind what the step does
 * @param chunk this stage's model chunk concerned: the one computed, the one whose output
 *              activation or input gradient is sent, or the one whose input activation or output
 *              gradient is received
 * @param microBatch the micro-batch index
 * @param peer the other stage's index in the pipeline group for transfers; -1 for computations
 */
public record StageAction(Kind kind, int chunk, int microBatch, int peer) {

    /** What a step does. */
    public enum Kind {
        /** Run the forward step. */
        FORWARD,
        /** Back-propagate through the micro-batch's scope. */
        BACKWARD,
        /** Send this chunk's output activation to the next stage. */
        SEND_ACTIVATION,
        /** Receive this chunk's input activation from the previous stage. */
        RECEIVE_ACTIVATION,
        /** Send the gradient of this chunk's input to the previous stage. */
        SEND_GRADIENT,
        /** Receive the gradient of this chunk's output from the next stage. */
        RECEIVE_GRADIENT;

        /** @return true for {@link #FORWARD} and {@link #BACKWARD} */
        public boolean isCompute() {
            return this == FORWARD || this == BACKWARD;
        }
    }

    /** Validates indices: computations have no peer, transfers have one. */
    public StageAction {
        if (kind == null) {
            throw new IllegalArgumentException("kind must not be null");
        }
        if (chunk < 0 || microBatch < 0) {
            throw new IllegalArgumentException("chunk " + chunk + " and micro-batch " + microBatch + " must be >= 0");
        }
        if (kind.isCompute() != (peer == -1) || peer < -1) {
            throw new IllegalArgumentException(kind + " with peer " + peer
                    + ": computations take peer -1, transfers a stage index >= 0");
        }
    }

    static StageAction forward(VirtualMicroBatch v) {
        return new StageAction(Kind.FORWARD, v.chunk(), v.microBatch(), -1);
    }

    static StageAction backward(VirtualMicroBatch v) {
        return new StageAction(Kind.BACKWARD, v.chunk(), v.microBatch(), -1);
    }

    @Override
    public String toString() {
        String base = kind + "(chunk " + chunk + ", micro-batch " + microBatch;
        return peer < 0 ? base + ")" : base + ", stage " + peer + ")";
    }
}
