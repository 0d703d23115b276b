package io.mcore4j.pipeline;

import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.Tensors;

/**
 * What one forward-backward run needs to know besides the model: how many micro-batches, what is
 * sent between stages, and whether to train.
 *
 * @param numMicrobatches micro-batches per step ({@code M}), at least 1
 * @param tensorShape shape of the activations sent between stages, e.g.
 *                    {@code [seq (/ TP with sequence parallelism), microBatch, hidden]}; with
 *                    {@code variableSeqLengths} only its number of dims is used
 * @param dtype dtype of those activations (and of the gradients sent back): float32, float16 or float64
 * @param forwardOnly run forwards only (evaluation): no-grad scopes, no backward, gradients untouched
 * @param microBatchGroupSize micro-batches per group with interleaving ({@code G}); 0 means the pipeline size
 * @param variableSeqLengths whether activation shapes differ between micro-batches; each activation
 *                           is then preceded by its shape
 * @param lossesOnDevice leave the last stage's losses on the device ({@link ScheduleResult#deviceLosses()})
 *                       instead of reading them to the host at the end of the run; a read waits for
 *                       every kernel queued so far, so a training step that reads its loss only when
 *                       it logs sets this (Megatron keeps its losses on the device the same way)
 */
public record ScheduleConfig(int numMicrobatches, Shape tensorShape, DataType dtype, boolean forwardOnly,
                             int microBatchGroupSize, boolean variableSeqLengths, boolean lossesOnDevice) {

    /**
     * A configuration whose losses are read to the host at the end of the run.
     *
     * @param numMicrobatches micro-batches per step
     * @param tensorShape shape of the activations sent between stages
     * @param dtype their dtype
     * @param forwardOnly run forwards only
     * @param microBatchGroupSize micro-batches per group with interleaving, 0 for the pipeline size
     * @param variableSeqLengths whether activation shapes differ between micro-batches
     * @throws IllegalArgumentException naming the offending value
     */
    public ScheduleConfig(int numMicrobatches, Shape tensorShape, DataType dtype, boolean forwardOnly,
                          int microBatchGroupSize, boolean variableSeqLengths) {
        this(numMicrobatches, tensorShape, dtype, forwardOnly, microBatchGroupSize, variableSeqLengths, false);
    }

    /**
     * Validates the values.
     *
     * @throws IllegalArgumentException naming the offending value
     */
    public ScheduleConfig {
        if (numMicrobatches < 1) {
            throw new IllegalArgumentException("number of micro-batches must be at least 1, got " + numMicrobatches);
        }
        if (tensorShape == null || tensorShape.dimension() == 0) {
            throw new IllegalArgumentException("the shape of the activations sent between stages must have at"
                    + " least one dim, got " + tensorShape);
        }
        for (long d : tensorShape.getShape()) {
            if (d < 1) {
                throw new IllegalArgumentException("activation shape " + Tensors.describe(tensorShape)
                        + " has a dim below 1");
            }
        }
        if (dtype != DataType.FLOAT32 && dtype != DataType.FLOAT16 && dtype != DataType.BFLOAT16 && dtype != DataType.FLOAT64) {
            throw new IllegalArgumentException("activations sent between stages must be float32, float16, bfloat16"
                    + " or float64, got " + dtype);
        }
        if (microBatchGroupSize < 0) {
            throw new IllegalArgumentException("micro-batch group size must be >= 0 (0 = pipeline size), got "
                    + microBatchGroupSize);
        }
    }

    /**
     * A training run with fixed activation shapes and the default group size.
     *
     * @param numMicrobatches micro-batches per step
     * @param tensorShape shape of the activations sent between stages
     * @param dtype their dtype
     * @return the config
     */
    public static ScheduleConfig of(int numMicrobatches, Shape tensorShape, DataType dtype) {
        return new ScheduleConfig(numMicrobatches, tensorShape, dtype, false, 0, false);
    }

    /**
     * @param value whether to run forwards only
     * @return a copy with {@code forwardOnly} set
     */
    public ScheduleConfig withForwardOnly(boolean value) {
        return new ScheduleConfig(numMicrobatches, tensorShape, dtype, value, microBatchGroupSize, variableSeqLengths,
                lossesOnDevice);
    }

    /**
     * @param value micro-batches per group with interleaving, 0 for the pipeline size
     * @return a copy with {@code microBatchGroupSize} set
     */
    public ScheduleConfig withMicroBatchGroupSize(int value) {
        return new ScheduleConfig(numMicrobatches, tensorShape, dtype, forwardOnly, value, variableSeqLengths,
                lossesOnDevice);
    }

    /**
     * @param value whether activation shapes differ between micro-batches
     * @return a copy with {@code variableSeqLengths} set
     */
    public ScheduleConfig withVariableSeqLengths(boolean value) {
        return new ScheduleConfig(numMicrobatches, tensorShape, dtype, forwardOnly, microBatchGroupSize, value,
                lossesOnDevice);
    }

    /**
     * @param value whether to leave the last stage's losses on the device (see the record comment)
     * @return a copy with {@code lossesOnDevice} set
     */
    public ScheduleConfig withLossesOnDevice(boolean value) {
        return new ScheduleConfig(numMicrobatches, tensorShape, dtype, forwardOnly, microBatchGroupSize,
                variableSeqLengths, value);
    }
}
