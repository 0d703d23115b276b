package io.mcore4j.pipeline;

/**
 * One entry of a stage's forward or backward order: a micro-batch on a model chunk.
 *
 * @param chunk the model chunk (virtual stage index on the rank), from 0
 * @param microBatch the micro-batch index, from 0
 */
public record VirtualMicroBatch(int chunk, int microBatch) {

    /** Rejects negative indices. */
    public VirtualMicroBatch {
        if (chunk < 0 || microBatch < 0) {
            throw new IllegalArgumentException("chunk " + chunk + " and micro-batch " + microBatch + " must be >= 0");
        }
    }

    @Override
    public String toString() {
        return "(chunk " + chunk + ", micro-batch " + microBatch + ")";
    }
}
