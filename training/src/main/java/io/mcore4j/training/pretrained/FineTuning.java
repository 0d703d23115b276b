package io.mcore4j.training.pretrained;

import io.mcore4j.optimizer.LearningRateSchedule;
import io.mcore4j.optimizer.OptimizerConfig;

import java.io.PrintStream;
import java.util.Objects;

/**
 * What {@link PretrainedGpt#fineTune} runs: iterations of the training step over the samples, with
 * Megatron's batch vocabulary. Build with {@link #builder()}.
 *
 * @param iterations optimizer steps ({@code --train-iters})
 * @param lrSchedule the learning rate of each iteration
 * @param microBatchSize samples per micro-batch
 * @param globalBatchSize samples per iteration, all data-parallel ranks together: a multiple of
 *                        {@code microBatchSize} times the data-parallel size
 * @param optimizer the update rule, weight decay and clipping; its precision is left at FP32 (or set
 *                  to the model's): fine-tuning takes the precision from the model's dtype
 * @param logInterval iterations per printed line
 * @param log where the logging rank prints its lines
 */
public record FineTuning(long iterations, LearningRateSchedule lrSchedule, int microBatchSize, long globalBatchSize,
                         OptimizerConfig optimizer, int logInterval, PrintStream log) {

    /** Validates the values, naming the bad one. */
    public FineTuning {
        Objects.requireNonNull(lrSchedule, "lrSchedule");
        Objects.requireNonNull(optimizer, "optimizer");
        Objects.requireNonNull(log, "log");
        if (iterations < 1) {
            throw new IllegalArgumentException("fine-tuning iterations " + iterations + " must be at least 1");
        }
        if (microBatchSize < 1) {
            throw new IllegalArgumentException("micro-batch size " + microBatchSize + " must be at least 1");
        }
        if (globalBatchSize < microBatchSize || globalBatchSize % microBatchSize != 0) {
            throw new IllegalArgumentException("global batch size " + globalBatchSize + " is not a positive multiple of"
                    + " the micro-batch size " + microBatchSize);
        }
        if (logInterval < 1) {
            throw new IllegalArgumentException("log interval " + logInterval + " must be at least 1");
        }
        if (optimizer.overlapGradReduce() || optimizer.overlapParamGather()) {
            // their hooks would stay on the model after the step is closed, and logits() would call them
            throw new IllegalArgumentException("fine-tuning a PretrainedGpt does not overlap communication with compute"
                    + " (overlapGradReduce " + optimizer.overlapGradReduce() + ", overlapParamGather "
                    + optimizer.overlapParamGather() + "); expected both false");
        }
    }

    /**
     * Defaults: 10 iterations, a constant learning rate of 1e-4, micro- and global batch of 1 sample,
     * AdamW with Megatron-Core's defaults otherwise, a line per iteration on standard output.
     *
     * @return a new builder
     */
    public static Builder builder() {
        return new Builder();
    }

    /** Options of a {@link FineTuning}; validated by {@link #build()}. */
    public static final class Builder {
        private long iterations = 10;
        private LearningRateSchedule lrSchedule = LearningRateSchedule.constant(1e-4);
        private int microBatchSize = 1;
        private long globalBatchSize = 1;
        private OptimizerConfig optimizer = OptimizerConfig.builder().build();
        private int logInterval = 1;
        private PrintStream log = System.out;

        private Builder() {}

        /** @param v optimizer steps @return this builder */
        public Builder iterations(long v) {
            iterations = v;
            return this;
        }

        /** @param v a constant learning rate @return this builder */
        public Builder lr(double v) {
            lrSchedule = LearningRateSchedule.constant(v);
            return this;
        }

        /** @param v the learning rate per iteration (warm-up, decay) @return this builder */
        public Builder lrSchedule(LearningRateSchedule v) {
            lrSchedule = v;
            return this;
        }

        /** @param v samples per micro-batch @return this builder */
        public Builder microBatchSize(int v) {
            microBatchSize = v;
            return this;
        }

        /** @param v samples per iteration, all data-parallel ranks together @return this builder */
        public Builder globalBatchSize(long v) {
            globalBatchSize = v;
            return this;
        }

        /** @param v the update rule, weight decay and clipping @return this builder */
        public Builder optimizer(OptimizerConfig v) {
            optimizer = v;
            return this;
        }

        /** @param v iterations per printed line @return this builder */
        public Builder logInterval(int v) {
            logInterval = v;
            return this;
        }

        /** @param v where the logging rank prints @return this builder */
        public Builder log(PrintStream v) {
            log = v;
            return this;
        }

        /**
         * @return the options
         * @throws IllegalArgumentException naming a bad value
         */
        public FineTuning build() {
            return new FineTuning(iterations, lrSchedule, microBatchSize, globalBatchSize, optimizer, logInterval, log);
        }
    }
}
