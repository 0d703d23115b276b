package io.mcore4j.training;

import java.nio.file.Path;

/**
 * Where and when a {@link TrainingLoop} saves and resumes (Megatron's --save, --load,
 * --save-interval, --override-opt-param-scheduler, --use-checkpoint-opt_param-scheduler,
 * --exit-on-missing-checkpoint).
 *
 * @param save directory checkpoints are written to, or null for none
 * @param load directory to resume from, or null; may equal {@code save} (resume when it holds a checkpoint)
 * @param saveInterval iterations between saves; 0 saves only at the end (when {@code save} is set)
 * @param keepLast complete checkpoints kept in {@code save}
 * @param scheduler what a resumed run does when its learning-rate schedule differs from the checkpoint's
 * @param exitOnMissingCheckpoint fail, rather than start from scratch, when {@code load} holds no checkpoint
 */
public record CheckpointConfig(Path save, Path load, int saveInterval, int keepLast, SchedulerOnResume scheduler,
                               boolean exitOnMissingCheckpoint) {

    /** What a resumed run does with a learning-rate schedule that differs from the checkpoint's. */
    public enum SchedulerOnResume {
        /** Fail, naming both values (Megatron's default). */
        CHECK,
        /** Use the schedule given now (--override-opt-param-scheduler). */
        OVERRIDE,
        /** Use the checkpoint's schedule (--use-checkpoint-opt_param-scheduler). */
        USE_CHECKPOINT
    }

    /** No checkpoints. */
    public static final CheckpointConfig NONE = new CheckpointConfig(null, null, 0, 2, SchedulerOnResume.CHECK, false);

    /** Validates the values. */
    public CheckpointConfig {
        if (saveInterval < 0) {
            throw new IllegalArgumentException("--save-interval " + saveInterval + " must not be negative");
        }
        if (keepLast < 1) {
            throw new IllegalArgumentException("checkpoints to keep " + keepLast + " must be at least 1");
        }
        if (scheduler == null) {
            throw new IllegalArgumentException("scheduler policy must not be null");
        }
    }
}
