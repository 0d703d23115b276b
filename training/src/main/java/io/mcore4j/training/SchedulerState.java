package io.mcore4j.training;

import io.mcore4j.optimizer.LearningRateSchedule;

import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;

/**
 * The learning-rate schedule as a checkpoint records it (Megatron's {@code opt_param_scheduler}
 * names), and the resume check: a resumed run keeps its schedule unless told otherwise.
 */
final class SchedulerState {
    static final String KEY = "opt_param_scheduler";

    private SchedulerState() {}

    static Map<String, Object> of(LearningRateSchedule s) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("max_lr", s.maxLr());
        m.put("min_lr", s.minLr());
        m.put("lr_warmup_steps", s.warmupSteps());
        m.put("lr_decay_steps", s.decaySteps());
        m.put("lr_decay_style", s.style().name().toLowerCase(Locale.ROOT));
        return m;
    }

    /**
     * The schedule a resumed run uses.
     *
     * @param given the schedule of this run's configuration
     * @param saved the checkpoint's {@link #KEY} entry, or null for checkpoints that predate it
     * @param policy what to do when they differ
     * @return {@code given}, or the checkpoint's schedule under {@link CheckpointConfig.SchedulerOnResume#USE_CHECKPOINT}
     * @throws IllegalArgumentException under {@link CheckpointConfig.SchedulerOnResume#CHECK} when a value differs,
     *         naming the value, its flag, and both numbers
     */
    static LearningRateSchedule resolve(LearningRateSchedule given, Object saved, CheckpointConfig.SchedulerOnResume policy) {
        if (!(saved instanceof Map<?, ?> m) || policy == CheckpointConfig.SchedulerOnResume.OVERRIDE) {
            return given;
        }
        LearningRateSchedule checkpoint = new LearningRateSchedule(number(m, "max_lr"), number(m, "min_lr"),
                (long) number(m, "lr_warmup_steps"), (long) number(m, "lr_decay_steps"),
                LearningRateSchedule.Style.valueOf(String.valueOf(m.get("lr_decay_style")).toUpperCase(Locale.ROOT)));
        if (policy == CheckpointConfig.SchedulerOnResume.USE_CHECKPOINT) {
            return checkpoint;
        }
        Map<String, Object> now = of(given);
        Map<String, Object> then = of(checkpoint);
        Map<String, String> flags = Map.of("max_lr", "--lr", "min_lr", "--min-lr", "lr_warmup_steps", "--lr-warmup-iters",
                "lr_decay_steps", "--lr-decay-iters (default --train-iters)", "lr_decay_style", "--lr-decay-style");
        for (String key : now.keySet()) {
            if (!String.valueOf(now.get(key)).equals(String.valueOf(then.get(key)))) {
                throw new IllegalArgumentException("the learning-rate schedule differs from the checkpoint's: " + key + " ("
                        + flags.get(key) + ") is " + now.get(key) + " but the checkpoint's is " + then.get(key)
                        + "; pass --override-opt-param-scheduler to use the new value, or"
                        + " --use-checkpoint-opt_param-scheduler to keep the checkpoint's schedule");
            }
        }
        return given;
    }

    private static double number(Map<?, ?> m, String key) {
        Object v = m.get(key);
        if (v instanceof Number n) {
            return n.doubleValue();
        }
        throw new IllegalArgumentException("checkpoint entry " + KEY + "." + key + " is " + v + ", not a number");
    }
}
