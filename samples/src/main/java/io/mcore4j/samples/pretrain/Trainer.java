package io.mcore4j.samples.pretrain;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.checkpoint.CheckpointManager;
import io.mcore4j.checkpoint.LoadResult;
import io.mcore4j.checkpoint.StrictMode;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.data.gpt.SampleDataset;
import io.mcore4j.data.sampler.PretrainingSampler;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.gpt.GptModel;
import io.mcore4j.models.transformer.LayerSpec;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.moe.MoeConfig;
import io.mcore4j.optimizer.DistributedDataParallel;
import io.mcore4j.optimizer.LearningRateSchedule;
import io.mcore4j.optimizer.MegatronOptimizer;
import io.mcore4j.optimizer.OptimizerConfig;
import io.mcore4j.optimizer.ParameterLayout;
import io.mcore4j.optimizer.Optimizers;
import io.mcore4j.optimizer.StepResult;
import io.mcore4j.parallel.Backend;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.ReduceOp;
import io.mcore4j.pipeline.LayerAssignment;
import io.mcore4j.pipeline.ScheduleConfig;
import io.mcore4j.pipeline.ScheduleResult;
import io.mcore4j.pipeline.Schedules;
import io.mcore4j.tensorparallel.MlpActivation;
import io.mcore4j.tensorparallel.Vocab;

import java.io.IOException;
import java.io.PrintStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * One rank's training job: builds the model chunks, optimizer and data of this rank, then runs
 * iterations of forward/backward schedule, gradient sync and optimizer step, with logging,
 * evaluation and checkpoints. The logging rank (last pipeline stage, TP rank 0, DP rank 0) prints
 * and writes metrics.
 */
final class Trainer {
    private static final String MODEL_PREFIX = "model.";
    private static final String OPTIMIZER_PREFIX = "optimizer.";
    private static final int KEEP_CHECKPOINTS = 2;
    private final PretrainArgs args;
    private final ProcessGroups groups;
    private final NDManager root;
    private final TransformerConfig config;
    private final ModelContext ctx;
    private final List<GptModel> chunks = new ArrayList<>();
    private final List<Parameter> parameters = new ArrayList<>();
    private final DistributedDataParallel ddp;
    private final MegatronOptimizer optimizer;
    private final LearningRateSchedule schedule;
    private final SampleDataset train;
    private final SampleDataset valid;
    private final int microBatches;
    private final boolean logging;
    private final PrintStream out;
    private long iteration;
    private long consumedSamples;

    Trainer(PretrainArgs args, Backend backend, NDManager root, SampleDataset train, SampleDataset valid, PrintStream out) {
        this.args = args;
        this.root = root;
        this.out = out;
        int world = backend.worldSize();
        int vp = args.layersPerVirtualStage() > 0
                ? args.numLayers() / (args.pipelineParallel() * args.layersPerVirtualStage()) : 1;
        ParallelDims dims = ParallelDims.builder(world).tensorParallel(args.tensorParallel())
                .pipelineParallel(args.pipelineParallel()).virtualPipelineParallel(vp)
                .expertParallel(args.expertParallel()).build();
        this.groups = ProcessGroups.create(dims, backend);
        this.microBatches = args.microBatchesPerStep(world);
        this.config = modelConfig(args);
        config.validate(dims, args.layersPerVirtualStage());
        this.ctx = ModelContext.create(config, groups, root, new SeedScheme(args.seed()));
        LayerAssignment layers = LayerAssignment.even(config.numLayers(), dims.pipelineParallel(), vp);
        List<Parameter> shared = new ArrayList<>();
        int stage = groups.pipelineRank();
        for (int c = 0; c < vp; c++) {
            GptModel chunk = GptModel.build(ctx, LayerSpec.tensorParallel(), layers.layers(stage, c),
                    stage == 0 && c == 0, stage == dims.pipelineParallel() - 1 && c == vp - 1);
            chunks.add(chunk);
            parameters.addAll(chunk.parameters());
            shared.addAll(chunk.sharedEmbeddingParameters());
        }
        OptimizerConfig optimizerConfig = OptimizerConfig.builder().algorithm(OptimizerConfig.Algorithm.ADAMW)
                .lr(args.lr()).weightDecay(args.weightDecay()).clipGrad(args.clipGrad()).fp16(args.fp16())
                .useDistributedOptimizer(args.useDistributedOptimizer()).fusedAdam(args.fusedAdam())
                .overlapGradReduce(args.overlapGradReduce()).bucketSizeBytes(4 * args.ddpBucketSize()).build();
        this.ddp = new DistributedDataParallel(parameters, groups, optimizerConfig, shared);
        if (optimizerConfig.overlapGradReduce()) {
            for (GptModel chunk : chunks) {
                chunk.addGradientReadyListener(ddp);
            }
        }
        // optimizer state is keyed like the weights it belongs to, so checkpoints reshard across layouts
        Map<Parameter, String> keys = new IdentityHashMap<>();
        for (GptModel chunk : chunks) {
            chunk.namedParameters(MODEL_PREFIX).forEach((key, p) -> keys.put(p, key));
        }
        this.optimizer = Optimizers.create(parameters, ddp, groups, optimizerConfig, ParameterLayout.byKey(keys::get));
        long decay = args.lrDecayIters() > 0 ? args.lrDecayIters() : args.trainIters();
        this.schedule = new LearningRateSchedule(args.lr(), args.minLr(), args.lrWarmupIters(), decay,
                LearningRateSchedule.Style.valueOf(args.lrDecayStyle().toUpperCase(Locale.ROOT)));
        this.train = train;
        this.valid = valid;
        this.logging = groups.isLastStage() && groups.tensorParallelRank() == 0 && groups.dataParallelRank() == 0;
    }

    static TransformerConfig modelConfig(PretrainArgs a) {
        // Megatron's padding to a multiple of divisor x TP; padded rows are never targets
        int vocab = Vocab.padded(a.vocabSize(), a.vocabDivisor(), a.tensorParallel());
        TransformerConfig.Builder b = TransformerConfig.builder(a.numLayers(), a.hiddenSize(), a.numAttentionHeads(), vocab)
                .maxSequenceLength(a.maxPositionEmbeddings())
                .dropout(a.hiddenDropout(), a.attentionDropout())
                .sequenceParallel(a.sequenceParallel())
                .tiedEmbeddings(!a.untieEmbeddings())
                .recompute(TransformerConfig.Recompute.valueOf(a.recompute().toUpperCase(Locale.ROOT)))
                .dtype(a.fp16() ? DataType.FLOAT16 : DataType.FLOAT32);
        if (a.numQueryGroups() > 0) {
            b.queryGroups(a.numQueryGroups());
        }
        if (a.ffnHiddenSize() > 0) {
            b.ffnHiddenSize(a.ffnHiddenSize());
        }
        if (a.swiglu()) {
            b.activation(MlpActivation.SWIGLU);
        }
        if (a.rmsNorm()) {
            b.normalization(TransformerConfig.Normalization.RMS_NORM, 1e-5);
        }
        if (a.rope()) {
            b.positionEmbedding(TransformerConfig.PositionEmbedding.ROPE);
        }
        if (a.numExperts() > 0) {
            int ffn = a.moeFfnHiddenSize() > 0 ? a.moeFfnHiddenSize()
                    : a.ffnHiddenSize() > 0 ? a.ffnHiddenSize() : 4 * a.hiddenSize();
            b.moe(new TransformerConfig.MoeSettings(a.numExperts(), a.moeTopK(), a.moeLayerFrequency(), ffn,
                    a.moeAuxLossCoeff(), a.moeDispatcher().equals("alltoall") ? MoeConfig.Dispatcher.ALL_TO_ALL
                    : MoeConfig.Dispatcher.ALL_GATHER));
        }
        return b.build();
    }

    /** Runs the job; returns the per-iteration training losses seen by the logging rank (empty elsewhere). */
    List<Double> run() throws IOException {
        if (args.load() != null) {
            load(args.load());
        }
        Path metricsDir = args.metricsDir() != null ? args.metricsDir()
                : args.save() != null ? args.save() : Path.of("runs", "pretrain-gpt");
        List<Double> losses = new ArrayList<>();
        try (MetricsLog metrics = logging ? new MetricsLog(metricsDir) : null) {
            if (logging) {
                out.printf(Locale.ROOT, "pretrain-gpt: %s, %d parameters on this rank, %d micro-batches of %d per step%n",
                        groups.dims(), parameters.stream().mapToLong(p -> p.data().size()).sum(), microBatches,
                        args.microBatchSize());
            }
            double windowLoss = 0;
            int windowSteps = 0;
            int skipped = 0;
            long windowStart = System.nanoTime();
            while (iteration < args.trainIters()) {
                iteration++;
                double lr = schedule.lr(iteration);
                // MoE auxiliary losses get the same upstream gradient as the main loss's micro-batches
                ctx.auxLossScale().set(optimizer.lossScale() / microBatches);
                ddp.expectBackwardPasses(microBatches); // bucket reductions start during the last backward
                ScheduleResult result = runSchedule(train, consumedSamples, false);
                for (GptModel chunk : chunks) {
                    chunk.finishStep();
                }
                ddp.finishGradSync();
                StepResult step = optimizer.step(lr, args.weightDecay());
                ddp.zeroGrad();
                consumedSamples += args.globalBatchSize();
                double loss = dataParallelMeanLoss(result);
                if (step.skipped()) {
                    skipped++;
                }
                if (logging) {
                    losses.add(loss);
                    windowLoss += loss;
                    windowSteps++;
                    Progress.show(iteration, args.trainIters());
                }
                if (iteration % args.logInterval() == 0 || iteration == args.trainIters()) {
                    double seconds = (System.nanoTime() - windowStart) / 1e9;
                    if (logging) {
                        report(metrics, windowLoss / windowSteps, lr, step, skipped, seconds, windowSteps);
                    }
                    windowLoss = 0;
                    windowSteps = 0;
                    skipped = 0;
                    windowStart = System.nanoTime();
                }
                if (args.evalInterval() > 0 && iteration % args.evalInterval() == 0) {
                    evaluate(metrics);
                }
                if (args.save() != null && args.saveInterval() > 0 && iteration % args.saveInterval() == 0) {
                    save(args.save());
                }
            }
            if (args.save() != null && (args.saveInterval() == 0 || iteration % args.saveInterval() != 0)) {
                save(args.save());
            }
            if (logging) {
                Path png = metrics.writeLossCurve();
                out.println("metrics: " + metricsDir.resolve("metrics.jsonl") + ", loss curve: "
                        + (png != null ? png : "not drawn (this Java runtime has no java.desktop module)"));
            }
        }
        return losses;
    }

    private ScheduleResult runSchedule(SampleDataset data, long consumed, boolean forwardOnly) {
        PretrainingSampler sampler = new PretrainingSampler(data.size(), consumed % data.size(), args.microBatchSize(),
                groups.dataParallelRank(), groups.dims().dataParallel(), true);
        double scale = forwardOnly ? 1.0 : optimizer.lossScale();
        int seq = args.seqLength();
        long local = config.sequenceParallel() ? seq / args.tensorParallel() : seq;
        ScheduleConfig sc = new ScheduleConfig(microBatches, new Shape(local, args.microBatchSize(), config.hiddenSize()),
                config.dtype(), forwardOnly, 0, false);
        ScheduleResult result = Schedules.forwardBackward((scope, chunk, mb, input) -> {
            GptModel model = chunks.get(chunk);
            NDArray tokens = null;
            NDArray labels = null;
            if (model.isPreProcess() || model.isPostProcess()) {
                NDArray batch = batch(scope.manager(), data, sampler.microBatch(mb % sampler.steps()));
                tokens = batch.get(":, 0:" + seq).transpose(1, 0);
                labels = batch.get(":, 1:" + (seq + 1)).transpose(1, 0);
            }
            NDArray output = model.forward(scope, model.isPreProcess() ? tokens : null, input,
                    model.isPostProcess() ? labels : null);
            return model.isPostProcess() && scale != 1.0 ? Tensors.scale(output, scale, scope.manager()) : output;
        }, chunks.size(), groups, root, sc);
        if (scale != 1.0 && result.losses().length > 0) {
            float[] unscaled = result.losses().clone();
            for (int i = 0; i < unscaled.length; i++) {
                unscaled[i] /= (float) scale;
            }
            return new ScheduleResult(unscaled, result.peakLiveMicroBatches());
        }
        return result;
    }

    /** Tokens of the given samples as an int64 [b, s + 1] tensor. */
    private static NDArray batch(NDManager manager, SampleDataset data, long[] indices) {
        int width = data.sequenceLength() + 1;
        int[] flat = new int[indices.length * width];
        int[] one = new int[width];
        for (int i = 0; i < indices.length; i++) {
            data.sample(indices[i], one);
            System.arraycopy(one, 0, flat, i * width, width);
        }
        return manager.create(flat, new Shape(indices.length, width)).toType(DataType.INT64, false);
    }

    /** Mean loss of the step on the last stage, averaged over data-parallel ranks; NaN on other stages. */
    private double dataParallelMeanLoss(ScheduleResult result) {
        if (!groups.isLastStage()) {
            return Double.NaN;
        }
        double sum = 0;
        for (float l : result.losses()) {
            sum += l;
        }
        double mean = sum / result.losses().length;
        Communicator dp = groups.dp();
        if (dp.size() == 1) {
            return mean;
        }
        try (NDManager temp = root.newSubManager()) {
            NDArray x = temp.create(new double[] {mean});
            return dp.allReduce(x, ReduceOp.AVG, temp).getDouble(0);
        }
    }

    private void report(MetricsLog metrics, double loss, double lr, StepResult step, int skipped, double seconds, int steps) {
        double tokens = (double) args.globalBatchSize() * args.seqLength() * steps;
        double tokensPerSecond = tokens / seconds;
        int world = groups.dims().worldSize();
        double tflopsPerRank = config.flopsPerToken(args.seqLength()) * tokensPerSecond / world / 1e12;
        double mfu = tflopsPerRank / args.peakTflops();
        long rssMb = residentMegabytes();
        Progress.clear();
        out.printf(Locale.ROOT, " iteration %6d/%6d | loss %.4f | lr %.3e | grad norm %.3f | loss scale %.1f | skipped %d"
                        + " | %.0f tokens/s | %.4f TFLOP/s/rank | MFU %.5f%% | %.1f ms/iter | RSS %d MB%n",
                iteration, args.trainIters(), loss, lr, step.gradNorm(), step.lossScale(), skipped, tokensPerSecond,
                tflopsPerRank, 100 * mfu, 1000 * seconds / steps, rssMb);
        metrics.record("iteration", iteration, "loss", loss, "lr", lr, "grad_norm", step.gradNorm(),
                "loss_scale", step.lossScale(), "skipped", skipped, "tokens_per_s", tokensPerSecond,
                "tflops_per_rank", tflopsPerRank, "mfu", mfu, "ms_per_iter", 1000 * seconds / steps, "rss_mb", rssMb);
    }

    private void evaluate(MetricsLog metrics) {
        if (valid == null) {
            return;
        }
        double sum = 0;
        for (int i = 0; i < args.evalIters(); i++) {
            ScheduleResult r = runSchedule(valid, (long) i * args.globalBatchSize(), true);
            sum += dataParallelMeanLoss(r);
        }
        if (logging) {
            double loss = sum / args.evalIters();
            Progress.clear();
            out.printf(Locale.ROOT, " validation at iteration %d | loss %.4f | perplexity %.2f%n", iteration, loss, Math.exp(loss));
            metrics.record("iteration", iteration, "valid_loss", loss);
        }
    }

    private List<ShardedTensor> modelState() {
        List<ShardedTensor> state = new ArrayList<>();
        for (GptModel chunk : chunks) {
            state.addAll(chunk.shardedState(MODEL_PREFIX));
        }
        return state;
    }

    private void save(Path directory) {
        Map<String, Object> common = new LinkedHashMap<>();
        common.put("iteration", iteration);
        common.put("consumed_samples", consumedSamples);
        common.put("seed", args.seed());
        common.put("layout", groups.dims().toString());
        List<ShardedTensor> state = modelState();
        state.addAll(optimizer.shardedState(OPTIMIZER_PREFIX));
        new CheckpointManager(directory, KEEP_CHECKPOINTS).save(iteration, state, common, groups.world());
        if (logging) {
            Progress.clear();
            out.println(" saved checkpoint of iteration " + iteration + " in " + directory);
        }
    }

    private void load(Path directory) {
        List<ShardedTensor> model = modelState();
        List<ShardedTensor> optimizerState = optimizer.shardedState(OPTIMIZER_PREFIX);
        List<ShardedTensor> targets = new ArrayList<>(model);
        targets.addAll(optimizerState);
        LoadResult result = new CheckpointManager(directory, KEEP_CHECKPOINTS)
                .loadLatest(targets, groups.world(), StrictMode.RAISE_ALL)
                .orElseThrow(() -> new IllegalArgumentException("--load " + directory + " holds no complete checkpoint"));
        // the state was read into the optimizer's own tensors; this also restores its step count and loss scaler
        optimizer.loadShardedState(OPTIMIZER_PREFIX, optimizerState);
        Map<String, Object> common = result.common();
        this.iteration = ((Number) common.get("iteration")).longValue();
        this.consumedSamples = ((Number) common.get("consumed_samples")).longValue();
        if (logging) {
            out.println(" resumed from " + directory + " at iteration " + iteration + " (saved under " + common.get("layout") + ")");
        }
    }

    private static long residentMegabytes() {
        try {
            for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
                if (line.startsWith("VmRSS:")) {
                    return Long.parseLong(line.replaceAll("[^0-9]", "")) / 1024;
                }
            }
        } catch (IOException | RuntimeException e) {
            return -1;
        }
        return -1;
    }
}
