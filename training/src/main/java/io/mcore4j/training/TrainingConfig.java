package io.mcore4j.training;

import io.mcore4j.optimizer.LearningRateSchedule;

import java.util.Objects;

/**
 * The iterations a {@link TrainingLoop} runs and what it does between them.
 *
 * @param trainIters the iteration to stop at (--train-iters); a resumed run continues up to it
 * @param lrSchedule the learning rate per iteration (--lr, --min-lr, --lr-warmup-iters, --lr-decay-iters, --lr-decay-style)
 * @param weightDecay weight decay (--weight-decay), not applied to 1-D parameters
 * @param logInterval iterations per logged line (--log-interval)
 * @param evalInterval iterations between evaluations (--eval-interval); 0 never evaluates
 * @param evalIters global batches per evaluation (--eval-iters)
 * @param checkpoint saving and resuming
 * @param seed the run's seed, recorded in checkpoints (--seed)
 */
public record TrainingConfig(long trainIters, LearningRateSchedule lrSchedule, double weightDecay, int logInterval,
                             int evalInterval, int evalIters, CheckpointConfig checkpoint, long seed) {

    /** Validates the values. */
    public TrainingConfig {
        Objects.requireNonNull(lrSchedule, "lrSchedule");
        Objects.requireNonNull(checkpoint, "checkpoint");
        if (trainIters < 0) {
            throw new IllegalArgumentException("--train-iters " + trainIters + " must not be negative");
        }
        if (logInterval < 1) {
            throw new IllegalArgumentException("--log-interval " + logInterval + " must be at least 1");
        }
        if (evalInterval < 0) {
            throw new IllegalArgumentException("--eval-interval " + evalInterval + " must not be negative");
        }
        if (evalInterval > 0 && evalIters < 1) {
            throw new IllegalArgumentException("--eval-iters " + evalIters + " must be at least 1 when --eval-interval "
                    + evalInterval + " asks for evaluation");
        }
        if (!(weightDecay >= 0) || Double.isInfinite(weightDecay)) {
            throw new IllegalArgumentException("--weight-decay " + weightDecay + " must be a finite number >= 0");
        }
    }
}
