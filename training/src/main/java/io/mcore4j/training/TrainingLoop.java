package io.mcore4j.training;

import io.mcore4j.moe.MoeAuxLossTracker;

import ai.djl.Device;
import ai.djl.util.cuda.CudaUtils;
import io.mcore4j.checkpoint.CheckpointManager;
import io.mcore4j.checkpoint.DistCheckpointing;
import io.mcore4j.checkpoint.LoadResult;
import io.mcore4j.checkpoint.StrictMode;
import io.mcore4j.core.ResidentMemory;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.optimizer.LearningRateSchedule;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.training.metrics.MetricFormat;
import io.mcore4j.training.metrics.MetricNames;
import io.mcore4j.training.metrics.MetricsSink;

import java.io.PrintStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.OptionalLong;

/**
 * The training loop: resume, iterations of {@link TrainStep}, logging every {@code logInterval},
 * evaluation every {@code evalInterval}, checkpoints every {@code saveInterval} and at the end.
 * The logging rank (last pipeline stage, tensor-, context- and data-parallel rank 0) prints one line per
 * logged window and feeds the {@link MetricsSink}s; every rank runs the same iterations.
 *
 * <p>Checkpoints hold the model and optimizer state plus {@code iteration}, {@code consumed_samples},
 * {@code seed}, {@code layout} and the learning-rate schedule ({@code opt_param_scheduler}). A resumed
 * run continues the stopped run's samples and schedule: a schedule that differs fails naming the value
 * (see {@link CheckpointConfig.SchedulerOnResume}). A run never writes into a save directory holding
 * another run's complete checkpoints: without resuming from that directory it fails before training.
 * Incomplete saves (an {@code iter_*} directory without {@code mcore4j_metadata.json}, left by a save that was
 * killed or ran out of disk) are not checkpoints: the loop prints one line naming them and trains from
 * scratch, or resumes from the newest complete checkpoint; the next save replaces or deletes them.
 */
public final class TrainingLoop {
    private final TrainStep step;
    private final TrainingConfig config;
    private final BatchSource train;
    private final BatchSource valid;
    private final PrintStream out;
    private final List<MetricsSink> sinks;
    private final Double peakTflops;
    private final boolean moePerLayerLogging;
    private final IterationListener listener;
    private final ProcessGroups groups;
    private final boolean logging;
    private LearningRateSchedule schedule;
    private long iteration;
    private long consumedSamples;

    /** Told after every iteration, on every rank (benchmarks, tests). */
    @FunctionalInterface
    public interface IterationListener {
        /**
         * @param iteration the iteration just done
         * @param result what it did on this rank
         */
        void iterationDone(long iteration, TrainStepResult result);
    }

    private TrainingLoop(Builder b) {
        this.step = b.step;
        this.config = b.config;
        this.train = b.train;
        this.valid = b.valid;
        this.out = b.out;
        this.sinks = List.copyOf(b.sinks);
        this.peakTflops = b.peakTflops;
        this.moePerLayerLogging = b.moePerLayerLogging;
        this.listener = b.listener;
        this.groups = step.groups();
        this.logging = groups.isLastStage() && groups.tensorParallelRank() == 0 && groups.dataParallelRank() == 0
                && groups.cp().rank() == 0;
        this.schedule = config.lrSchedule();
    }

    /**
     * @param step the step to iterate
     * @param config iterations, intervals, schedule and checkpoints
     * @param train training micro-batches
     * @return a builder
     */
    public static Builder builder(TrainStep step, TrainingConfig config, BatchSource train) {
        return new Builder(step, config, train);
    }

    /** @return whether this rank prints and writes metrics */
    public boolean isLoggingRank() {
        return logging;
    }

    /**
     * Runs the loop (resuming first when configured), then saves a final checkpoint when a save
     * directory is set and the last iteration was not just saved. Closes the sinks at the end.
     *
     * @return what the run did
     * @throws IllegalArgumentException if the save directory holds another run's checkpoints, or a
     *         resumed run's schedule differs from the checkpoint's (see the class comment)
     */
    public TrainingSummary run() {
        CheckpointConfig ckpt = config.checkpoint();
        boolean resumed = ckpt.load() != null && resume(ckpt.load());
        checkSaveDirectory(ckpt, resumed);
        long start = iteration;
        for (MetricsSink sink : logging ? sinks : List.<MetricsSink>of()) {
            sink.begin(start, config.trainIters());
        }
        if (logging) {
            // a resumed run with nothing left says so instead of naming an empty range ("iterations 121 to 120")
            String range = start < config.trainIters()
                    ? String.format(Locale.ROOT, "iterations %d to %d", start + 1, config.trainIters())
                    : start == 0 ? "nothing to train: --train-iters is 0"
                    : String.format(Locale.ROOT, "nothing left to train: the checkpoint is at iteration %d and"
                            + " --train-iters is %d", start, config.trainIters());
            out.printf(Locale.ROOT, "training: %s, %,d parameters on this rank, %d micro-batches of %d per iteration, "
                            + "%s%n", groups.dims(), step.model().parameters().stream()
                            .mapToLong(p -> p.data().size()).sum(), step.microBatches(), step.microBatchSize(), range);
        }
        try {
            return iterate(ckpt, start);
        } finally {
            for (MetricsSink sink : logging ? sinks : List.<MetricsSink>of()) {
                sink.close();
            }
        }
    }

    private TrainingSummary iterate(CheckpointConfig ckpt, long start) {
        List<Double> losses = new ArrayList<>();
        Window window = new Window();
        boolean savedLast = false;
        while (iteration < config.trainIters()) {
            iteration++;
            double lr = schedule.lr(iteration);
            TrainStepResult r = step.run(lr, config.weightDecay(), train, consumedSamples);
            consumedSamples += r.samples();
            if (listener != null) {
                listener.iterationDone(iteration, r);
            }
            window.add(r);
            if (logging) {
                for (MetricsSink sink : sinks) {
                    sink.iterationDone(iteration, config.trainIters());
                }
            }
            if (iteration % config.logInterval() == 0 || iteration == config.trainIters()) {
                // the window's losses and MoE metrics are read here, not per iteration: a read waits for the device
                // (the metrics' report is collective: every rank takes it after its step's own collectives)
                window.readLosses();
                window.addAuxLosses(step.reportAuxLosses());
                if (logging) {
                    window.results.forEach(w -> losses.add(w.loss()));
                    report(window, lr, r);
                }
                window = new Window();
            }
            if (config.evalInterval() > 0 && iteration % config.evalInterval() == 0) {
                evaluate();
            }
            savedLast = false;
            if (ckpt.save() != null && ckpt.saveInterval() > 0 && iteration % ckpt.saveInterval() == 0) {
                save(ckpt);
                savedLast = true;
            }
        }
        if (ckpt.save() != null && !savedLast && iteration > start) {
            save(ckpt);
        }
        step.finishParamSync(); // the caller reads the trained weights (e.g. --save-hf)
        return new TrainingSummary(start, iteration, consumedSamples, losses);
    }

    private boolean resume(Path directory) {
        CheckpointManager manager = new CheckpointManager(directory, config.checkpoint().keepLast());
        if (manager.latestIteration().isEmpty()) {
            List<Path> incomplete = incompleteSaves(directory);
            if (config.checkpoint().exitOnMissingCheckpoint()) {
                throw new IllegalArgumentException("--load " + directory + " holds no complete checkpoint"
                        + (incomplete.isEmpty() ? "" : " (only the incomplete save " + incomplete.get(0) + ")")
                        + " (--exit-on-missing-checkpoint)");
            }
            if (logging) {
                out.println(incomplete.isEmpty() ? "no checkpoint in " + directory + ": starting from scratch"
                        : ignoring(incomplete) + "; training from scratch");
            }
            return false;
        }
        List<ShardedTensor> targets = step.shardedState();
        List<ShardedTensor> optimizerState = targets.stream()
                .filter(t -> t.key().startsWith(TrainStep.OPTIMIZER_PREFIX) || t.key().startsWith(TrainStep.FP8_PREFIX))
                .toList();
        LoadResult result = manager.loadLatest(targets, groups.world(), StrictMode.RAISE_ALL)
                .orElseThrow(() -> new IllegalArgumentException("--load " + directory + " holds no complete checkpoint"));
        Map<String, Object> common = result.common();
        this.schedule = SchedulerState.resolve(config.lrSchedule(), common.get(SchedulerState.KEY),
                config.checkpoint().scheduler());
        // the model's state was read in place; the optimizer copies its own (step count, loss scaler), as does FP8's
        step.loadOptimizerState(optimizerState);
        this.iteration = longEntry(common, "iteration", directory);
        this.consumedSamples = longEntry(common, "consumed_samples", directory);
        if (logging) {
            out.println("resumed from " + directory + " at iteration " + iteration + " (saved under "
                    + common.get("layout") + ")");
            List<Path> incomplete = incompleteSaves(directory);
            if (!incomplete.isEmpty()) {
                out.println(ignoring(incomplete) + "; resuming from iteration " + iteration);
            }
        }
        return true;
    }

    private static long longEntry(Map<String, Object> common, String key, Path directory) {
        if (common.get(key) instanceof Number n) {
            return n.longValue();
        }
        throw new IllegalArgumentException("the checkpoint in " + directory + " has no numeric '" + key
                + "' in its common state (found " + common.get(key) + ")");
    }

    /**
     * Refuses a save directory that is a file or holds another run's complete checkpoints, and names
     * the incomplete saves (staging leftovers of a killed or failed save) it ignores: they are not
     * checkpoints, and the next save replaces or deletes them.
     */
    private void checkSaveDirectory(CheckpointConfig ckpt, boolean resumed) {
        Path save = ckpt.save();
        if (save == null) {
            return;
        }
        if (Files.exists(save) && !Files.isDirectory(save)) {
            throw new IllegalArgumentException("--save " + save + " is a file, not a directory");
        }
        boolean sameAsLoad = ckpt.load() != null && ckpt.load().toAbsolutePath().normalize()
                .equals(save.toAbsolutePath().normalize());
        if (sameAsLoad) {
            return; // resume() loaded its newest complete checkpoint, or found none, and named the incomplete ones
        }
        CheckpointManager manager = new CheckpointManager(save, ckpt.keepLast());
        OptionalLong latest = manager.latestIteration();
        if (latest.isPresent() || !completeSaves(save).isEmpty()) {
            throw new IllegalArgumentException("--save " + save + " already holds checkpoints"
                    + (latest.isPresent() ? " (latest iteration " + latest.getAsLong() + ")" : "")
                    + " of another run; pass --load " + save + " to resume that run, or choose an empty --save directory");
        }
        List<Path> incomplete = incompleteSaves(save);
        if (logging && !incomplete.isEmpty()) {
            out.println(ignoring(incomplete) + (resumed ? "; resuming from iteration " + iteration : "; training from scratch"));
        }
    }

    /** @return the iteration directories under {@code dir} that hold a complete checkpoint (a metadata file) */
    private static List<Path> completeSaves(Path dir) {
        return new CheckpointManager(dir, 1).saveDirectories().stream().filter(DistCheckpointing::isComplete).toList();
    }

    /** @return the iteration directories under {@code dir} without a metadata file: saves that never finished */
    private static List<Path> incompleteSaves(Path dir) {
        return new CheckpointManager(dir, 1).saveDirectories().stream().filter(p -> !DistCheckpointing.isComplete(p)).toList();
    }

    private static String ignoring(List<Path> incomplete) {
        return "ignoring incomplete save" + (incomplete.size() > 1 ? "s " : " ")
                + String.join(", ", incomplete.stream().map(Path::toString).toList())
                + " (no mcore4j_metadata.json)";
    }

    private void evaluate() {
        if (valid == null) {
            return;
        }
        double sum = 0;
        for (int i = 0; i < config.evalIters(); i++) {
            sum += step.evaluate(valid, (long) i * step.globalBatchSize());
        }
        if (logging) {
            double loss = sum / config.evalIters();
            out.printf(Locale.ROOT, " validation at iteration %d | loss %.4f | perplexity %.2f%n", iteration, loss,
                    Math.exp(loss));
            Map<String, Double> scalars = new LinkedHashMap<>();
            scalars.put(MetricNames.VALID_LOSS, loss);
            scalars.put(MetricNames.VALID_PPL, Math.exp(loss));
            for (MetricsSink sink : sinks) {
                sink.write(iteration, scalars);
            }
        }
    }

    private void save(CheckpointConfig ckpt) {
        Map<String, Object> common = new LinkedHashMap<>();
        common.put("iteration", iteration);
        common.put("consumed_samples", consumedSamples);
        common.put("seed", config.seed());
        common.put("layout", groups.dims().toString());
        common.put(SchedulerState.KEY, SchedulerState.of(schedule));
        common.putAll(step.model().checkpointMetadata());
        new CheckpointManager(ckpt.save(), ckpt.keepLast()).save(iteration, step.shardedState(), common, groups.world());
        if (logging) {
            out.println(" saved checkpoint of iteration " + iteration + " in " + ckpt.save());
        }
    }

    private void report(Window w, double lr, TrainStepResult last) {
        double tokensPerSecond = w.tokens / w.seconds;
        int world = groups.dims().worldSize();
        double flops = step.model().flopsPerToken(step.seqLength());
        double tflopsPerRank = flops * tokensPerSecond / world / 1e12;
        Optional<Double> memoryGiB = deviceMemoryGiB();
        StringBuilder line = new StringBuilder(String.format(Locale.ROOT,
                " iteration %6d/%6d | loss %.4f | lr %.3e | grad norm %.3f | loss scale %.0f | skipped %d | %s tokens/s",
                iteration, config.trainIters(), w.loss / w.steps, lr, last.gradNorm(), last.lossScale(), w.skipped,
                MetricFormat.significant(tokensPerSecond, 4)));
        if (Double.isFinite(tflopsPerRank)) {
            line.append(" | ").append(MetricFormat.significant(tflopsPerRank, 4)).append(" TFLOP/s/rank");
            if (peakTflops != null) {
                line.append(String.format(Locale.ROOT, " | MFU %.1f%%", 100 * tflopsPerRank / peakTflops));
            }
        }
        line.append(String.format(Locale.ROOT, " | %.1f ms/iter", 1000 * w.seconds / w.steps));
        // Megatron prints each MoE loss averaged over the window's iterations
        w.auxLosses.forEach((name, sum) -> line.append(String.format(Locale.ROOT, " | %s %.6E", name, sum / w.steps)));
        line.append(memoryGiB.map(g -> String.format(Locale.ROOT, " | device memory %.1f GiB", g))
                .orElseGet(() -> String.format(Locale.ROOT, " | RSS %d MB", residentMegabytes())));
        out.println(line);
        Map<String, Double> scalars = new LinkedHashMap<>();
        scalars.put(MetricNames.LOSS, w.loss / w.steps);
        scalars.put(MetricNames.LEARNING_RATE, lr);
        scalars.put(MetricNames.GRAD_NORM, last.gradNorm());
        scalars.put(MetricNames.LOSS_SCALE, last.lossScale());
        scalars.put(MetricNames.SKIPPED, (double) w.skipped);
        scalars.put(MetricNames.BATCH_SIZE, (double) last.samples());
        scalars.put(MetricNames.ITERATION_TIME, w.seconds / w.steps);
        scalars.put(MetricNames.TOKENS_PER_SECOND, tokensPerSecond);
        if (Double.isFinite(tflopsPerRank)) {
            scalars.put(MetricNames.TFLOPS_PER_RANK, tflopsPerRank);
        }
        memoryGiB.ifPresent(g -> scalars.put(MetricNames.MEMORY_GIB, g));
        w.auxLosses.forEach((name, sum) -> scalars.put(name, sum / w.steps));
        if (moePerLayerLogging) {
            // Megatron's per-layer names, layers counted from 0: moe/<name>_layer_<i>
            w.auxLossLayers.forEach((name, sums) -> {
                for (int l = 0; l < sums.length; l++) {
                    scalars.put("moe/" + name + "_layer_" + l, sums[l] / w.steps);
                }
            });
        }
        for (MetricsSink sink : sinks) {
            sink.write(iteration, scalars);
        }
    }

    private Optional<Double> deviceMemoryGiB() {
        Device device = step.model().parameters().isEmpty() ? Device.cpu()
                : step.model().parameters().get(0).data().getDevice();
        if (!device.isGpu()) {
            return Optional.empty();
        }
        return Optional.of(CudaUtils.getGpuMemory(device).getCommitted() / (double) (1L << 30));
    }

    private static long residentMegabytes() {
        long bytes = ResidentMemory.resident();
        return bytes < 0 ? -1 : bytes / (1024 * 1024);
    }

    /** Sums over the iterations of one logged window. */
    private static final class Window {
        /** The window's results in order; their losses are read by {@link #readLosses()}. */
        final List<TrainStepResult> results = new ArrayList<>();
        double loss;
        double seconds;
        double tokens;
        int steps;
        int skipped;

        /**
         * Per MoE loss name: the sum over the window's steps of the layer average, and of each layer's value (one
         * report covers the window's steps).
         */
        final Map<String, Double> auxLosses = new LinkedHashMap<>();
        final Map<String, double[]> auxLossLayers = new LinkedHashMap<>();

        void addAuxLosses(MoeAuxLossTracker.Report report) {
            report.averages().forEach((name, v) -> auxLosses.merge(name, v, Double::sum));
            report.perLayer().forEach((name, v) -> {
                double[] sum = auxLossLayers.computeIfAbsent(name, n -> new double[v.length]);
                for (int l = 0; l < v.length; l++) {
                    sum[l] += v[l];
                }
            });
        }

        void add(TrainStepResult r) {
            results.add(r);
            seconds += r.seconds();
            tokens += r.tokens();
            steps++;
            skipped += r.skipped() ? 1 : 0;
        }

        /** Reads the losses from the device and sums them, in iteration order. */
        void readLosses() {
            loss = 0;
            for (TrainStepResult r : results) {
                loss += r.loss();
            }
        }
    }

    /** Options of a {@link TrainingLoop}. */
    public static final class Builder {
        private final TrainStep step;
        private final TrainingConfig config;
        private final BatchSource train;
        private BatchSource valid;
        private PrintStream out = System.out;
        private final List<MetricsSink> sinks = new ArrayList<>();
        private Double peakTflops;
        private boolean moePerLayerLogging;
        private IterationListener listener;

        private Builder(TrainStep step, TrainingConfig config, BatchSource train) {
            this.step = Objects.requireNonNull(step, "step");
            this.config = Objects.requireNonNull(config, "config");
            this.train = Objects.requireNonNull(train, "train");
        }

        /**
         * @param v evaluation micro-batches, or null for none
         * @return this builder
         */
        public Builder valid(BatchSource v) {
            valid = v;
            return this;
        }

        /**
         * @param v where the logging rank prints
         * @return this builder
         */
        public Builder out(PrintStream v) {
            out = Objects.requireNonNull(v, "out");
            return this;
        }

        /**
         * @param v a sink fed by the logging rank; the loop closes it when {@link #run()} ends
         * @return this builder
         */
        public Builder sink(MetricsSink v) {
            sinks.add(Objects.requireNonNull(v, "sink"));
            return this;
        }

        /**
         * @param v the device's peak TFLOP/s, for MFU; null (the default) prints no MFU
         * @return this builder
         */
        public Builder peakTflops(Double v) {
            if (v != null && !(v > 0)) {
                throw new IllegalArgumentException("--peak-tflops " + v + " must be positive");
            }
            peakTflops = v;
            return this;
        }

        /**
         * @param v also write each MoE layer's auxiliary losses to the sinks, as {@code moe/<name>_layer_<i>}
         *          (Megatron's {@code --moe-per-layer-logging}); off by default
         * @return this builder
         */
        public Builder moePerLayerLogging(boolean v) {
            moePerLayerLogging = v;
            return this;
        }

        /**
         * @param v told after every iteration on every rank, or null
         * @return this builder
         */
        public Builder listener(IterationListener v) {
            listener = v;
            return this;
        }

        /** @return the loop */
        public TrainingLoop build() {
            return new TrainingLoop(this);
        }
    }
}
