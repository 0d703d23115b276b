package io.mcore4j.samples.pretrain;

import io.mcore4j.contextparallel.CpCommType;
import io.mcore4j.core.Precision;
import io.mcore4j.data.gpt.SplitWeights;
import io.mcore4j.hf.HfConfig;
import io.mcore4j.hf.HfDtype;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.transformer.AttentionBackend;
import io.mcore4j.moe.MoeConfig;
import io.mcore4j.optimizer.LearningRateSchedule;
import io.mcore4j.optimizer.OptimizerConfig;
import io.mcore4j.samples.launch.ParallelLayoutOptions;
import io.mcore4j.tensorparallel.MlpActivation;
import io.mcore4j.tensorparallel.Vocab;
import io.mcore4j.training.CheckpointConfig;
import io.mcore4j.training.TrainingConfig;
import io.mcore4j.training.gpt.GptTrainingSetup;
import picocli.CommandLine;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Set;

/**
 * The flags of {@code pretrain-gpt}, named and defaulted as in Megatron-LM where Megatron has them,
 * and the one place they map onto the library's typed configuration ({@link #setup()}). Parsing
 * errors and inconsistent values raise {@link IllegalArgumentException} naming the flag and the value.
 * The benchmark reuses these flags (it is {@code pretrain-gpt --mock-data} with a timing report).
 */
@CommandLine.Command(sortOptions = false)
public final class PretrainArgs {

    /** Megatron's {@code --lr-decay-style} values and the schedule style each selects. */
    public enum DecayStyle {
        constant(LearningRateSchedule.Style.CONSTANT), linear(LearningRateSchedule.Style.LINEAR),
        cosine(LearningRateSchedule.Style.COSINE), inverse_square_root(LearningRateSchedule.Style.INVERSE_SQUARE_ROOT);

        private final LearningRateSchedule.Style style;

        DecayStyle(LearningRateSchedule.Style style) {
            this.style = style;
        }
    }

    /** Megatron's {@code --recompute-granularity} values, plus {@code none}, and the model's setting for each. */
    public enum RecomputeGranularity {
        none(TransformerConfig.Recompute.NONE), selective(TransformerConfig.Recompute.SELECTIVE),
        full(TransformerConfig.Recompute.FULL);

        private final TransformerConfig.Recompute recompute;

        RecomputeGranularity(TransformerConfig.Recompute recompute) {
            this.recompute = recompute;
        }
    }

    /** Megatron's {@code --normalization} values. */
    public enum NormalizationKind { LayerNorm, RMSNorm }

    /** Megatron's {@code --position-embedding-type} values. */
    public enum PositionEmbeddingKind { learned_absolute, rope }

    /** Megatron's {@code --moe-token-dispatcher-type} values. */
    public enum DispatcherKind { allgather, alltoall }

    /** Megatron's {@code --attention-backend} values and the backend each selects. */
    public enum AttentionKind {
        auto(AttentionBackend.AUTO), flash(AttentionBackend.FLASH), fused(AttentionBackend.FUSED),
        unfused(AttentionBackend.UNFUSED), local(AttentionBackend.LOCAL);

        private final AttentionBackend backend;

        AttentionKind(AttentionBackend backend) {
            this.backend = backend;
        }
    }

    /** Megatron's {@code --cp-comm-type} values that are implemented, and the exchange each selects. */
    public enum CpCommKind {
        p2p(CpCommType.P2P), allgather(CpCommType.ALL_GATHER), all_gather(CpCommType.ALL_GATHER);

        private final CpCommType type;

        CpCommKind(CpCommType type) {
            this.type = type;
        }
    }

    /** Megatron's {@code --optimizer} values ({@code adam} is Adam with decoupled weight decay, as in Megatron). */
    public enum OptimizerKind { adam, sgd }

    // ranks and parallelism
    @Mixin
    final ParallelLayoutOptions layout = new ParallelLayoutOptions();
    @Option(names = "--sequence-parallel", description = "Split norms, dropout and residuals along the sequence over the tensor-parallel group.")
    boolean sequenceParallel;
    @Option(names = "--context-parallel-size", description = "Split each sequence over this many ranks (2 x size chunks,"
            + " load-balanced for causal attention). Default: ${DEFAULT-VALUE}.")
    int contextParallel = 1;
    @Option(names = "--auto-layout", description = "Choose the parallel layout, micro-batch size, recompute and"
            + " distributed optimizer with the planner (the fastest layout estimated to fit; the flags for them are"
            + " replaced) for this job's ranks.")
    boolean autoLayout;
    @Option(names = "--auto-layout-cluster", description = "The cluster --auto-layout plans for, as a JSON file (see plan"
            + " --help); default: this machine's GPUs (H200 or H100 calibration by their memory), or the CPU.")
    Path autoLayoutCluster;
    @Option(names = "--cp-comm-type", description = "How attention exchanges keys and values across the context-parallel"
            + " group: ${COMPLETION-CANDIDATES} (p2p: a ring; allgather and all_gather are one;"
            + " Megatron-Core's a2a and a2a+p2p are not implemented). Default: ${DEFAULT-VALUE}.")
    CpCommKind cpCommType = CpCommKind.p2p;

    // model
    @Option(names = "--num-layers", description = "Default: ${DEFAULT-VALUE}.")
    int numLayers = 4;
    @Option(names = "--hidden-size", description = "Default: ${DEFAULT-VALUE}.")
    int hiddenSize = 64;
    @Option(names = "--num-attention-heads", description = "Default: ${DEFAULT-VALUE}.")
    int numAttentionHeads = 4;
    @Option(names = "--num-query-groups", description = "Grouped-query attention: key/value heads (0: one per attention head). Default: ${DEFAULT-VALUE}.")
    int numQueryGroups = 0;
    @Option(names = "--ffn-hidden-size", description = "MLP width (0: 4 x hidden size). Default: ${DEFAULT-VALUE}.")
    int ffnHiddenSize = 0;
    @Option(names = "--seq-length", description = "Default: ${DEFAULT-VALUE}.")
    int seqLength = 64;
    @Option(names = "--max-position-embeddings", description = "0: the sequence length. Default: ${DEFAULT-VALUE}.")
    int maxPositionEmbeddings = 0;
    @Option(names = "--vocab-size", description = "Vocabulary of --mock-data and byte-level corpora. Default: ${DEFAULT-VALUE}.")
    int vocabSize = 257;
    @Option(names = "--make-vocab-size-divisible-by", description = "The vocabulary is padded to a multiple of this x TP. Default: ${DEFAULT-VALUE}.")
    int vocabDivisor = 128;
    @Option(names = "--swiglu", description = "SwiGLU MLP instead of GeLU.")
    boolean swiglu;
    @Option(names = "--normalization", description = "${COMPLETION-CANDIDATES}. Default: ${DEFAULT-VALUE}.")
    NormalizationKind normalization = NormalizationKind.LayerNorm;
    @Option(names = "--position-embedding-type", description = "${COMPLETION-CANDIDATES}. Default: ${DEFAULT-VALUE}.")
    PositionEmbeddingKind positionEmbedding = PositionEmbeddingKind.learned_absolute;
    @Option(names = "--untie-embeddings-and-output-weights", description = "A separate output layer instead of the embedding's transpose.")
    boolean untieEmbeddings;
    @Option(names = "--disable-bias-linear", description = "No biases in the attention and MLP linears.")
    boolean disableBiasLinear;
    @Option(names = "--hidden-dropout", description = "Default: ${DEFAULT-VALUE}.")
    double hiddenDropout = 0.0;
    @Option(names = "--attention-dropout", description = "Default: ${DEFAULT-VALUE}.")
    double attentionDropout = 0.0;
    @Option(names = "--attention-backend", description = "${COMPLETION-CANDIDATES}: auto uses libtorch's fused attention unless attention dropout is set. Default: ${DEFAULT-VALUE}.")
    AttentionKind attentionBackend = AttentionKind.auto;
    @Option(names = "--recompute-granularity", description = "${COMPLETION-CANDIDATES}. Default: ${DEFAULT-VALUE}.")
    RecomputeGranularity recompute = RecomputeGranularity.none;
    @Option(names = "--fp16", description = "float16 parameters and activations, float32 master weights, dynamic loss scaling.")
    boolean fp16;
    @Option(names = "--bf16", description = "bfloat16 parameters and activations, float32 master weights and optimizer state, no loss scaling.")
    boolean bf16;

    // mixture of experts
    @Option(names = "--num-experts", description = "Experts per MoE layer (0: dense MLPs). Default: ${DEFAULT-VALUE}.")
    int numExperts = 0;
    @Option(names = "--moe-router-topk", description = "Default: ${DEFAULT-VALUE}.")
    int moeTopK = 2;
    @Option(names = "--moe-ffn-hidden-size", description = "0: --ffn-hidden-size. Default: ${DEFAULT-VALUE}.")
    int moeFfnHiddenSize = 0;
    @Option(names = "--moe-layer-freq", description = "Every n-th layer is an MoE layer. Default: ${DEFAULT-VALUE}.")
    int moeLayerFrequency = 1;
    @Option(names = "--moe-aux-loss-coeff", description = "Default: ${DEFAULT-VALUE}.")
    double moeAuxLossCoeff = 0.0;
    @Option(names = "--moe-token-dispatcher-type", description = "${COMPLETION-CANDIDATES}. Default: ${DEFAULT-VALUE}.")
    DispatcherKind moeDispatcher = DispatcherKind.allgather;
    @Option(names = "--moe-per-layer-logging", description = "Also log each MoE layer's auxiliary losses (moe/<name>_layer_<i>).")
    boolean moePerLayerLogging;

    // optimizer and schedule
    @Option(names = "--optimizer", description = "${COMPLETION-CANDIDATES}. Default: ${DEFAULT-VALUE}.")
    OptimizerKind optimizer = OptimizerKind.adam;
    @Option(names = "--lr", description = "Default: ${DEFAULT-VALUE}.")
    double lr = 1e-3;
    @Option(names = "--min-lr", description = "Default: ${DEFAULT-VALUE}.")
    double minLr = 1e-4;
    @Option(names = "--lr-warmup-iters", description = "Default: ${DEFAULT-VALUE}.")
    int lrWarmupIters = 0;
    @Option(names = "--lr-decay-iters", description = "0: --train-iters. Default: ${DEFAULT-VALUE}.")
    int lrDecayIters = 0;
    @Option(names = "--lr-decay-style", description = "${COMPLETION-CANDIDATES}. Default: ${DEFAULT-VALUE}.")
    DecayStyle lrDecayStyle = DecayStyle.cosine;
    @Option(names = "--weight-decay", description = "Default: ${DEFAULT-VALUE}.")
    double weightDecay = 0.01;
    @Option(names = "--adam-beta1", description = "Default: ${DEFAULT-VALUE}.")
    double adamBeta1 = 0.9;
    @Option(names = "--adam-beta2", description = "Default: ${DEFAULT-VALUE}.")
    double adamBeta2 = 0.999;
    @Option(names = "--adam-eps", description = "Default: ${DEFAULT-VALUE}.")
    double adamEps = 1e-8;
    @Option(names = "--clip-grad", description = "Global gradient-norm clipping (0: off). Default: ${DEFAULT-VALUE}.")
    double clipGrad = 1.0;
    @Option(names = "--use-distributed-optimizer", description = "Shard optimizer state over data-parallel ranks (ZeRO-1).")
    boolean useDistributedOptimizer;
    @Option(names = "--overlap-grad-reduce", description = "Start data-parallel gradient reduction during the last backward.")
    boolean overlapGradReduce;
    @Option(names = "--ddp-bucket-size", description = "Parameters per data-parallel gradient bucket. Default: ${DEFAULT-VALUE}.")
    long ddpBucketSize = 10_000_000L;
    @Option(names = "--fused-adam", negatable = true, description = "Adam through libtorch's fused kernel (--no-fused-adam: one op at a time). Default: ${DEFAULT-VALUE}.")
    boolean fusedAdam = true;
    @Option(names = "--accumulate-allreduce-grads-in-fp32", negatable = true, description = "Reduce gradients in float32 under --fp16 and --bf16 (mcore4j's default; Megatron's is off). Default: ${DEFAULT-VALUE}.")
    boolean gradReduceInFp32 = true;

    // optimizer CPU offload (Megatron's hybrid device optimizer)
    @Option(names = {"--optimizer-cpu-offload", "--cpu-optimizer"}, description = "Hold the fp32 master weights and"
            + " moments of --optimizer-offload-fraction of the optimizer state in host memory and step them there"
            + " (gradients to the host, new parameters back each step); needs --use-distributed-optimizer and"
            + " --optimizer adam, as Megatron's does (through --use-precision-aware-optimizer).")
    boolean optimizerCpuOffload;
    @Option(names = "--optimizer-offload-fraction", description = "Share of the optimizer state --optimizer-cpu-offload"
            + " holds on the host, in (0, 1]. Default: ${DEFAULT-VALUE}.")
    double optimizerOffloadFraction = 1.0;

    // iterations, data, checkpoints, logging
    @Option(names = "--micro-batch-size", description = "Default: ${DEFAULT-VALUE}.")
    int microBatchSize = 4;
    @Option(names = "--global-batch-size", description = "Default: ${DEFAULT-VALUE}.")
    long globalBatchSize = 16;
    @Option(names = "--train-iters", description = "Default: ${DEFAULT-VALUE}.")
    long trainIters = 100;
    @Option(names = "--data-path", arity = "1..*", description = "Megatron's syntax: [weight] prefix [weight prefix ...].")
    List<String> dataPath = new ArrayList<>();
    @Option(names = "--mock-data", description = "Random tokens (for benchmarks).")
    boolean mockData;
    @Option(names = "--corpus-from-sources", description = "Build a byte-level corpus from the text files under a directory.")
    Path corpus;
    @Option(names = "--split", description = "Train, validation and test weights. Default: ${DEFAULT-VALUE}.")
    String split = "969,30,1";
    @Option(names = "--save", description = "Checkpoint directory.")
    Path save;
    @Option(names = "--load", description = "Resume from the latest checkpoint here (a missing or empty directory starts from scratch).")
    Path load;
    @Option(names = "--load-hf", description = "Start from this Hugging Face checkpoint (config.json + safetensors): its "
            + "config gives the model's shape, norms, positions, dropout and vocabulary (the model-shape flags and "
            + "--vocab-size are not used); --load, when it holds a checkpoint, still takes precedence.")
    Path loadHf;
    @Option(names = "--save-hf", description = "After training, write the model here as a Hugging Face directory "
            + "(config.json + model.safetensors) that transformers loads.")
    Path saveHf;
    @Option(names = "--save-hf-dtype", description = "dtype of --save-hf: bf16, f16 or f32. Default: ${DEFAULT-VALUE}.")
    String saveHfDtype = "bf16";
    @Option(names = "--save-interval", description = "Iterations between checkpoints (0: only at the end). Default: ${DEFAULT-VALUE}.")
    int saveInterval = 0;
    @Option(names = "--override-opt-param-scheduler", description = "On resume, use the schedule flags even where they differ from the checkpoint's.")
    boolean overrideScheduler;
    @Option(names = "--use-checkpoint-opt_param-scheduler", description = "On resume, use the checkpoint's learning-rate schedule.")
    boolean useCheckpointScheduler;
    @Option(names = "--exit-on-missing-checkpoint", description = "Fail when --load holds no checkpoint.")
    boolean exitOnMissingCheckpoint;
    @Option(names = "--eval-interval", description = "Iterations between evaluations (0: never). Default: ${DEFAULT-VALUE}.")
    int evalInterval = 0;
    @Option(names = "--eval-iters", description = "Global batches per evaluation. Default: ${DEFAULT-VALUE}.")
    int evalIters = 2;
    @Option(names = "--log-interval", description = "Default: ${DEFAULT-VALUE}.")
    int logInterval = 10;
    @Option(names = "--seed", description = "Default: ${DEFAULT-VALUE}.")
    long seed = 1234;
    @Option(names = "--metrics-dir", description = "metrics.jsonl and loss.png (default: --save, else runs/pretrain-gpt).")
    Path metricsDir;
    @Option(names = "--tensorboard-dir", description = "Also write TensorBoard event files here (Megatron's scalar names).")
    Path tensorboardDir;
    @Option(names = "--peak-tflops", description = "The device's peak TFLOP/s per rank, for MFU (default: 989 on CUDA devices, none on the CPU).")
    Double peakTflops;
    @Option(names = "--distributed-timeout-minutes", description = "How long a collective or a peer may stall before the run fails. Default: ${DEFAULT-VALUE}.")
    double timeoutMinutes = 10;
    @Option(names = "--cpu-initialization", description = "Initialise weights on the CPU even when training on a GPU.")
    boolean cpuInitialization;

    /**
     * Sets the global batch (front-ends that derive it from micro-batches per replica).
     *
     * @param v samples per iteration, all data-parallel ranks together
     */
    public void globalBatchSize(long v) {
        globalBatchSize = v;
    }

    /**
     * Sets the iterations (front-ends that decide them, such as the benchmark).
     *
     * @param trainIterations --train-iters
     * @param logEvery --log-interval
     */
    public void iterations(long trainIterations, int logEvery) {
        trainIters = trainIterations;
        logInterval = logEvery;
    }

    /** @return --peak-tflops, or null when not given */
    public Double peakTflops() {
        return peakTflops;
    }

    /** @return --micro-batch-size */
    public int microBatchSize() {
        return microBatchSize;
    }

    /** @return --tensor-model-parallel-size x --context-parallel-size x --pipeline-model-parallel-size */
    public int modelParallelSize() {
        return layout.tensorParallel() * contextParallel * layout.pipelineParallel();
    }

    /** @return --seq-length */
    public int seqLength() {
        return seqLength;
    }

    /** @return --attention-backend */
    public AttentionKind attentionBackend() {
        return attentionBackend;
    }

    /**
     * Parses flags.
     *
     * @param argv the command line
     * @return the parsed flags (not yet cross-checked: see {@link #setup()})
     * @throws IllegalArgumentException naming an unknown flag, a missing value or a bad number
     */
    public static PretrainArgs parse(String... argv) {
        PretrainArgs args = new PretrainArgs();
        try {
            new CommandLine(args).setOverwrittenOptionsAllowed(true).parseArgs(argv);
        } catch (CommandLine.ParameterException e) {
            throw new IllegalArgumentException(e.getMessage(), e);
        }
        return args;
    }

    /**
     * The typed configuration these flags describe, cross-checked. The world size is checked later
     * ({@link GptTrainingSetup#dims}).
     *
     * @return the setup
     * @throws IllegalArgumentException naming the flag and the value that is wrong
     */
    public GptTrainingSetup setup() {
        positive("--nproc", layout.nproc());
        positive("--tensor-model-parallel-size", layout.tensorParallel());
        positive("--pipeline-model-parallel-size", layout.pipelineParallel());
        positive("--expert-model-parallel-size", layout.expertParallel());
        positive("--context-parallel-size", contextParallel);
        positive("--num-layers", numLayers);
        positive("--hidden-size", hiddenSize);
        positive("--num-attention-heads", numAttentionHeads);
        positive("--seq-length", seqLength);
        positive("--micro-batch-size", microBatchSize);
        positive("--global-batch-size", globalBatchSize);
        positive("--vocab-size", vocabSize);
        positive("--make-vocab-size-divisible-by", vocabDivisor);
        positive("--log-interval", logInterval);
        try {
            HfDtype.parse(saveHfDtype);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException("--save-hf-dtype: " + e.getMessage(), e);
        }
        atLeastZero("--num-query-groups", numQueryGroups);
        atLeastZero("--ffn-hidden-size", ffnHiddenSize);
        atLeastZero("--max-position-embeddings", maxPositionEmbeddings);
        atLeastZero("--num-layers-per-virtual-pipeline-stage", layout.layersPerVirtualStage());
        atLeastZero("--train-iters", trainIters);
        atLeastZero("--lr-warmup-iters", lrWarmupIters);
        atLeastZero("--lr-decay-iters", lrDecayIters);
        atLeastZero("--num-experts", numExperts);
        if (hiddenSize % numAttentionHeads != 0) {
            throw new IllegalArgumentException("--hidden-size " + hiddenSize + " is not divisible by --num-attention-heads "
                    + numAttentionHeads);
        }
        int sources = (mockData ? 1 : 0) + (dataPath.isEmpty() ? 0 : 1) + (corpus != null ? 1 : 0);
        if (sources != 1) {
            throw new IllegalArgumentException("give exactly one of --data-path, --mock-data and --corpus-from-sources (got "
                    + sources + ")");
        }
        if (numExperts == 0 && layout.expertParallel() > 1) {
            throw new IllegalArgumentException("--expert-model-parallel-size " + layout.expertParallel() + " needs --num-experts");
        }
        if (overrideScheduler && useCheckpointScheduler) {
            throw new IllegalArgumentException("--override-opt-param-scheduler and --use-checkpoint-opt_param-scheduler"
                    + " exclude each other");
        }
        checkOptimizerOffload();
        if (!(timeoutMinutes > 0)) {
            throw new IllegalArgumentException("--distributed-timeout-minutes " + timeoutMinutes + " must be positive");
        }
        if (evalInterval > 0 && splitWeights().valid() == 0) {
            throw new IllegalArgumentException("--eval-interval " + evalInterval + " asks for evaluation but --split "
                    + split + " gives the validation set no data (use --eval-interval 0)");
        }
        if (trainIters > 0 && globalBatchSize > (Integer.MAX_VALUE - 1) / trainIters) {
            throw new IllegalArgumentException("--train-iters " + trainIters + " x --global-batch-size " + globalBatchSize
                    + " asks for more than " + (Integer.MAX_VALUE - 1) + " training samples (the sample index holds at most that)");
        }
        int virtualStages = 1;
        if (layout.layersPerVirtualStage() > 0) {
            if (layout.pipelineParallel() < 2 || numLayers % (layout.pipelineParallel() * layout.layersPerVirtualStage()) != 0) {
                throw new IllegalArgumentException("--num-layers-per-virtual-pipeline-stage " + layout.layersPerVirtualStage()
                        + " needs --pipeline-model-parallel-size >= 2 and --num-layers " + numLayers
                        + " divisible by it x --pipeline-model-parallel-size " + layout.pipelineParallel());
            }
            virtualStages = numLayers / (layout.pipelineParallel() * layout.layersPerVirtualStage());
        }
        TransformerConfig model = model();
        OptimizerConfig optimizerConfig = OptimizerConfig.builder()
                .algorithm(optimizer == OptimizerKind.sgd ? OptimizerConfig.Algorithm.SGD : OptimizerConfig.Algorithm.ADAMW)
                .lr(lr).beta1(adamBeta1).beta2(adamBeta2).eps(adamEps).weightDecay(weightDecay).clipGrad(clipGrad)
                .precision(Precision.of(fp16, bf16)).useDistributedOptimizer(useDistributedOptimizer).fusedAdam(fusedAdam)
                .gradReduceInFp32(gradReduceInFp32).overlapGradReduce(overlapGradReduce)
                .bucketSizeBytes(4 * ddpBucketSize).optimizerCpuOffload(optimizerCpuOffload)
                .optimizerOffloadFraction(optimizerOffloadFraction).build();
        long decay = lrDecayIters > 0 ? lrDecayIters : trainIters;
        LearningRateSchedule schedule;
        try {
            schedule = new LearningRateSchedule(lr, minLr, lrWarmupIters, decay,
                    lrDecayStyle.style);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException("--lr " + lr + ", --min-lr " + minLr + ", --lr-warmup-iters " + lrWarmupIters
                    + ", --lr-decay-iters " + decay + ": " + e.getMessage(), e);
        }
        CheckpointConfig checkpoint = new CheckpointConfig(save, load, saveInterval, 2,
                overrideScheduler ? CheckpointConfig.SchedulerOnResume.OVERRIDE
                        : useCheckpointScheduler ? CheckpointConfig.SchedulerOnResume.USE_CHECKPOINT
                        : CheckpointConfig.SchedulerOnResume.CHECK, exitOnMissingCheckpoint);
        TrainingConfig training = new TrainingConfig(trainIters, schedule, weightDecay, logInterval, evalInterval,
                evalIters, checkpoint, seed);
        AttentionBackend attention = attentionBackend.backend;
        checkAttentionMemory(model, attention);
        return new GptTrainingSetup(model, attention, layout.tensorParallel(), layout.pipelineParallel(), virtualStages, layout.expertParallel(),
                contextParallel, optimizerConfig, microBatchSize, globalBatchSize, seqLength, training, seed, !cpuInitialization);
    }

    /**
     * Megatron's rules for {@code --optimizer-cpu-offload}: it requires
     * {@code --use-precision-aware-optimizer}, which in turn requires the distributed optimizer and
     * {@code adam}; mcore4j's optimizer state is already what that flag selects with its default
     * dtypes (fp32 masters and moments), so the requirement becomes the other two flags. With
     * {@code --auto-layout} the planner decides the distributed optimizer, so only the optimizer is
     * checked then.
     */
    private void checkOptimizerOffload() {
        if (!(optimizerOffloadFraction > 0 && optimizerOffloadFraction <= 1)) {
            throw new IllegalArgumentException("--optimizer-offload-fraction " + optimizerOffloadFraction
                    + " must be in (0, 1]");
        }
        if (!optimizerCpuOffload) {
            return;
        }
        if (optimizer != OptimizerKind.adam) {
            throw new IllegalArgumentException("--optimizer-cpu-offload needs --optimizer adam (got " + optimizer
                    + "): Megatron requires --use-precision-aware-optimizer with it, which supports only adam");
        }
        if (!useDistributedOptimizer && !autoLayout) {
            throw new IllegalArgumentException("--optimizer-cpu-offload needs --use-distributed-optimizer: Megatron"
                    + " requires --use-precision-aware-optimizer with it, which supports only the distributed optimizer");
        }
    }

    /**
     * Unfused attention holds a float32 score matrix per head of a micro-batch ({@code b x heads/TP x
     * s x s}); a sequence whose scores cannot fit in this machine's memory fails here, naming the flags,
     * instead of inside libtorch's allocator.
     */
    private void checkAttentionMemory(TransformerConfig model, AttentionBackend attention) {
        if (attention.isFused(model)) {
            return;
        }
        double bytes = 4.0 * microBatchSize * ((double) numAttentionHeads / layout.tensorParallel()) * seqLength * (double) seqLength;
        long physical = physicalMemoryBytes();
        if (physical > 0 && bytes > physical) {
            throw new IllegalArgumentException(String.format(Locale.ROOT, "--seq-length %d with --micro-batch-size %d and"
                    + " unfused attention needs %.3g GB for one layer's attention scores; this machine has %.3g GB"
                    + " (use a shorter --seq-length or --attention-backend flash)", seqLength, microBatchSize, bytes / 1e9,
                    physical / 1e9));
        }
    }

    private static long physicalMemoryBytes() {
        try {
            for (String line : java.nio.file.Files.readAllLines(Path.of("/proc/meminfo"))) {
                if (line.startsWith("MemTotal:")) {
                    return Long.parseLong(line.replaceAll("[^0-9]", "")) * 1024;
                }
            }
        } catch (java.io.IOException | RuntimeException e) {
            return -1;
        }
        return -1;
    }

    /** @return the split weights of {@code --split} */
    SplitWeights splitWeights() {
        try {
            return SplitWeights.parse(split);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException("--split " + split + ": " + e.getMessage(), e);
        }
    }

    /** @return the Hugging Face config of {@code --load-hf}, or null without it */
    HfConfig hfConfig() {
        return loadHf == null ? null : HfConfig.read(loadHf, Set.of());
    }

    /** @return the vocabulary of the tokens (the Hugging Face checkpoint's with {@code --load-hf}) */
    int tokenVocabSize() {
        return loadHf == null ? vocabSize : hfConfig().vocabSize();
    }

    private TransformerConfig model() {
        if (loadHf != null) {
            // the checkpoint's shapes; precision, sequence parallelism and recompute stay the run's choice
            return hfConfig().transformerConfig(vocabDivisor, layout.tensorParallel(), Precision.of(fp16, bf16).paramDtype())
                    .toBuilder().sequenceParallel(sequenceParallel)
                    .recompute(recompute.recompute).build();
        }
        // Megatron's padding to a multiple of divisor x TP; padded rows are never targets
        int vocab = Vocab.padded(vocabSize, vocabDivisor, layout.tensorParallel());
        TransformerConfig.Builder b = TransformerConfig.builder(numLayers, hiddenSize, numAttentionHeads, vocab)
                .maxSequenceLength(maxPositionEmbeddings == 0 ? seqLength : maxPositionEmbeddings)
                .dropout(hiddenDropout, attentionDropout)
                .sequenceParallel(sequenceParallel)
                .tiedEmbeddings(!untieEmbeddings)
                .recompute(recompute.recompute)
                .dtype(Precision.of(fp16, bf16).paramDtype())
                .cpCommType(cpCommType.type);
        if (numQueryGroups > 0) {
            b.queryGroups(numQueryGroups);
        }
        if (ffnHiddenSize > 0) {
            b.ffnHiddenSize(ffnHiddenSize);
        }
        if (swiglu) {
            b.activation(MlpActivation.SWIGLU);
        }
        if (normalization == NormalizationKind.RMSNorm) {
            b.normalization(TransformerConfig.Normalization.RMS_NORM, 1e-5);
        }
        if (positionEmbedding == PositionEmbeddingKind.rope) {
            b.positionEmbedding(TransformerConfig.PositionEmbedding.ROPE);
        }
        if (disableBiasLinear) {
            b.addBiasLinear(false);
        }
        if (numExperts > 0) {
            int ffn = moeFfnHiddenSize > 0 ? moeFfnHiddenSize : ffnHiddenSize > 0 ? ffnHiddenSize : 4 * hiddenSize;
            b.moe(new TransformerConfig.MoeSettings(numExperts, moeTopK, moeLayerFrequency, ffn, moeAuxLossCoeff,
                    moeDispatcher == DispatcherKind.alltoall ? MoeConfig.Dispatcher.ALL_TO_ALL : MoeConfig.Dispatcher.ALL_GATHER));
        }
        try {
            return b.build();
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException("model flags: " + e.getMessage(), e);
        }
    }

    private static void positive(String flag, long value) {
        if (value < 1) {
            throw new IllegalArgumentException(flag + " " + value + " must be at least 1");
        }
    }

    private static void atLeastZero(String flag, long value) {
        if (value < 0) {
            throw new IllegalArgumentException(flag + " " + value + " must not be negative");
        }
    }
}
