package io.mcore4j.samples.pretrain;

import io.mcore4j.contextparallel.CpCommType;
import io.mcore4j.core.Precision;
import io.mcore4j.data.preprocess.PreprocessOptions;
import io.mcore4j.data.preprocess.TokenizerSpec;
import io.mcore4j.data.tokenizer.Tokenizer;
import io.mcore4j.data.gpt.SplitWeights;
import io.mcore4j.data.sampler.DataloaderType;
import io.mcore4j.hf.HfArchitecture;
import io.mcore4j.hf.HfConfig;
import io.mcore4j.hf.HfDtype;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.transformer.AttentionBackend;
import io.mcore4j.models.transformer.LoraConfig;
import io.mcore4j.optimizer.DataParallelShardingStrategy;
import io.mcore4j.optimizer.LearningRateSchedule;
import io.mcore4j.optimizer.OptimizerConfig;
import io.mcore4j.samples.launch.ParallelLayoutOptions;
import io.mcore4j.samples.tokenizer.TokenizerOptions;
import io.mcore4j.tensorparallel.MlpActivation;
import io.mcore4j.tensorparallel.Vocab;
import io.mcore4j.training.CheckpointConfig;
import io.mcore4j.training.CudaGraphConfig;
import io.mcore4j.training.TrainingConfig;
import io.mcore4j.training.gpt.DocumentMasking;
import io.mcore4j.training.gpt.GptTrainingSetup;
import picocli.CommandLine;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.Locale;
import java.util.OptionalInt;
import java.util.Set;
import java.util.function.Function;

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

    /** Megatron's {@code --recompute-method} values and the model's method for each. */
    public enum RecomputeMethodKind {
        uniform(TransformerConfig.RecomputeMethod.UNIFORM), block(TransformerConfig.RecomputeMethod.BLOCK);

        private final TransformerConfig.RecomputeMethod method;

        RecomputeMethodKind(TransformerConfig.RecomputeMethod method) {
            this.method = method;
        }
    }

    /** Megatron's {@code --normalization} values. */
    public enum NormalizationKind { LayerNorm, RMSNorm }

    /** Megatron's {@code --position-embedding-type} values. */
    public enum PositionEmbeddingKind { learned_absolute, rope }

    /** Megatron's {@code --attention-backend} values and the backend each selects. */
    public enum AttentionKind {
        auto(AttentionBackend.AUTO), flash(AttentionBackend.FLASH), fused(AttentionBackend.FUSED),
        unfused(AttentionBackend.UNFUSED), local(AttentionBackend.LOCAL);

        private final AttentionBackend backend;

        AttentionKind(AttentionBackend backend) {
            this.backend = backend;
        }
    }

    /**
     * Megatron's {@code --cp-comm-type} values, and the exchange each selects ({@code a2a+p2p} is written as
     * Megatron writes it; picocli matches a constant by its {@code toString} too).
     */
    public enum CpCommKind {
        p2p(CpCommType.P2P), allgather(CpCommType.ALL_GATHER), all_gather(CpCommType.ALL_GATHER), a2a(CpCommType.A2A),
        a2a_p2p(CpCommType.A2A_P2P) {
            @Override
            public String toString() {
                return CpCommType.A2A_P2P.flag();
            }
        };

        private final CpCommType type;

        CpCommKind(CpCommType type) {
            this.type = type;
        }
    }

    /** Megatron's {@code --transformer-impl} values. */
    public enum TransformerImpl { local, transformer_engine }

    /** Megatron's {@code --dataloader-type} values that are implemented, and the order each selects. */
    public enum DataloaderKind {
        single(DataloaderType.SINGLE), cyclic(DataloaderType.CYCLIC);

        private final DataloaderType type;

        DataloaderKind(DataloaderType type) {
            this.type = type;
        }
    }

    /** The vocabulary without {@code --vocab-size} or {@code --tokenizer-type}: byte-level tokens and their end of document. */
    static final int DEFAULT_VOCAB_SIZE = 257;

    /** Megatron's {@code --optimizer} values ({@code adam} is Adam with decoupled weight decay, as in Megatron). */
    public enum OptimizerKind { adam, sgd }

    // ranks and parallelism
    @Mixin
    final ParallelLayoutOptions layout = new ParallelLayoutOptions();
    @Option(names = "--sequence-parallel", description = "Split norms, dropout and residuals along the sequence over the tensor-parallel group.")
    boolean sequenceParallel;
    @Option(names = "--tp-comm-overlap", description = "With --sequence-parallel, overlap the linears' sequence all-gather"
            + " and reduce-scatter with their GEMMs, piece by piece (Megatron's meaning; the same results).")
    boolean tpCommOverlap;
    @Option(names = "--no-gradient-accumulation-fusion", description = "On GPUs, add each linear's weight gradient into"
            + " .grad in a second pass after its GEMM instead of inside it (Megatron's flag; the fusion is on by default"
            + " there and here). The CPU never fuses.")
    boolean noGradientAccumulationFusion;
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
            + " group: ${COMPLETION-CANDIDATES} (p2p: a ring; allgather and all_gather are one; a2a: heads scattered,"
            + " sequence gathered, heads divisible by CP; a2a+p2p: a2a inside groups of consecutive CP ranks, then a ring"
            + " across them, sized by --hierarchical-context-parallel-sizes). Default: ${DEFAULT-VALUE}.")
    CpCommKind cpCommType = CpCommKind.p2p;
    @Option(names = "--hierarchical-context-parallel-sizes", arity = "1..*", description = "Levels of the context-parallel"
            + " group, innermost first, multiplying to --context-parallel-size; --cp-comm-type a2a+p2p needs two: the a2a"
            + " group's size (consecutive CP ranks, typically within a node; it must divide the heads per tensor-parallel"
            + " rank), then the p2p ring's.")
    List<Integer> hierarchicalContextParallelSizes;

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
    @Option(names = "--vocab-size", description = "Without --tokenizer-type: the vocabulary of --mock-data, --data-path"
            + " and byte-level corpora (default 257). With NullTokenizer (required): Megatron's meaning, the ids below it"
            + " and itself the end of document (vocabulary --vocab-size + 1). Other tokenizer types give the vocabulary"
            + " themselves; a --vocab-size that differs is refused.")
    Integer vocabSize;
    @Option(names = "--make-vocab-size-divisible-by", description = "The vocabulary is padded to a multiple of this x TP. Default: ${DEFAULT-VALUE}.")
    int vocabDivisor = 128;
    @Option(names = "--swiglu", description = "SwiGLU MLP instead of GeLU.")
    boolean swiglu;
    @Option(names = "--normalization", description = "${COMPLETION-CANDIDATES}. Default: ${DEFAULT-VALUE}.")
    NormalizationKind normalization = NormalizationKind.LayerNorm;
    @Option(names = "--norm-epsilon", description = "Epsilon of every LayerNorm and RMSNorm. Default: 1e-5.")
    Double normEpsilon;
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
    @Option(names = "--recompute-method", description = "Required with --recompute-granularity full, refused otherwise"
            + " (Megatron's rule): uniform: each model chunk's layers in groups of --recompute-num-layers, each group"
            + " keeping only its input and recomputed as a whole in backward; block: the first --recompute-num-layers"
            + " layers of each chunk recomputed one by one, the others keeping their activations.")
    RecomputeMethodKind recomputeMethod;
    @Option(names = "--recompute-num-layers", description = "Required with --recompute-granularity full, refused otherwise:"
            + " layers per group (uniform) or recomputed per pipeline stage, or virtual stage (block); 1 to the layers of a stage.")
    Integer recomputeNumLayers;
    @Option(names = "--recompute-modules", arity = "1..*", description = "With --recompute-granularity selective (refused"
            + " otherwise): the parts of every layer recomputed in backward: core_attn (the core attention), mlp (a dense"
            + " layer's MLP), moe (a mixture of experts). Megatron-Core's moe_act, layernorm, mla_up_proj and"
            + " shared_experts are refused. Default: core_attn.")
    List<String> recomputeModules;
    @Option(names = "--fp16", description = "float16 parameters and activations, float32 master weights, dynamic loss scaling.")
    boolean fp16;
    @Option(names = "--bf16", description = "bfloat16 parameters and activations, float32 master weights and optimizer state, no loss scaling.")
    boolean bf16;
    @Option(names = "--initial-loss-scale", description = "fp16's first loss scale. Default: ${DEFAULT-VALUE}.")
    double initialLossScale = 65536;
    @Option(names = "--min-loss-scale", description = "fp16's smallest loss scale. Default: ${DEFAULT-VALUE}.")
    double minLossScale = 1;
    @Option(names = "--loss-scale-window", description = "Clean fp16 steps before the loss scale doubles. Default: ${DEFAULT-VALUE}.")
    int lossScaleWindow = 1000;
    @Option(names = "--hysteresis", description = "Overflowing fp16 steps tolerated before the loss scale halves. Default: ${DEFAULT-VALUE}.")
    int hysteresis = 2;

    // mixture of experts
    @Mixin
    final MoeOptions moe = new MoeOptions();

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
    @Option(names = "--use-megatron-fsdp", description = "Megatron FSDP: data parallelism sharding what"
            + " --data-parallel-sharding-strategy names; implies --use-distributed-optimizer for every strategy but"
            + " no_shard; not with pipeline parallelism.")
    boolean useMegatronFsdp;
    @Option(names = "--data-parallel-sharding-strategy", description = "With --use-megatron-fsdp: no_shard, optim"
            + " (ZeRO-1), optim_grads (ZeRO-2: gradients reduce-scattered per micro-batch, only shards kept) or"
            + " optim_grads_params (ZeRO-3: each layer's weights all-gathered before its forward and its backward and"
            + " released after each; without mcore4j's native library on a CUDA device, only under --recompute-granularity"
            + " full --recompute-method uniform). Default: ${DEFAULT-VALUE}, as Megatron's.")
    String dataParallelShardingStrategy = "no_shard";
    @Option(names = "--overlap-grad-reduce", description = "Start data-parallel gradient reduction during the last backward.")
    boolean overlapGradReduce;
    @Option(names = "--ddp-average-in-collective", description = "Average the data-parallel gradients in the"
            + " collective itself (NCCL's average) instead of dividing each bucket by the data-parallel size before a"
            + " summing one: one pass over every reduced buffer less.")
    boolean ddpAverageInCollective;
    @Option(names = "--overlap-param-gather", description = "With --use-distributed-optimizer: start the all-gather of"
            + " the updated parameters bucket by bucket after the optimizer step and wait for each bucket only when the"
            + " next forward reaches its parameters; needs --overlap-grad-reduce, as Megatron does.")
    boolean overlapParamGather;
    @Option(names = "--ddp-bucket-size", description = "Parameters per data-parallel gradient bucket. Default: Megatron's,"
            + " the larger of 40,000,000 and 1,000,000 per data-parallel rank.")
    Long ddpBucketSize;
    @Option(names = "--fused-adam", negatable = true, description = "Adam through libtorch's fused kernel (--no-fused-adam: one op at a time). Default: ${DEFAULT-VALUE}.")
    boolean fusedAdam = true;
    @Option(names = "--accumulate-allreduce-grads-in-fp32", negatable = true, description = "Reduce gradients in float32 under --fp16 and --bf16 (mcore4j's default; Megatron's is off). Default: ${DEFAULT-VALUE}.")
    boolean gradReduceInFp32 = true;

    // CUDA graphs (Megatron's --cuda-graph-*)
    @Option(names = "--cuda-graph-impl", description = "none or local: local with --cuda-graph-scope full_iteration"
            + " replays each step's forward-backward from one CUDA graph (on GPUs with mcore4j's graph library).")
    String cudaGraphImpl = "none";
    @Option(names = "--cuda-graph-scope", arity = "1..*", description = "What a graph holds: full_iteration (every"
            + " micro-batch's forward and backward of a step; Megatron's per-layer scopes are not implemented).")
    List<String> cudaGraphScope = new ArrayList<>();
    @Option(names = "--cuda-graph-warmup-steps", description = "Eager steps before the capture. Default: ${DEFAULT-VALUE}.")
    int cudaGraphWarmupSteps = 3;

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
    @Mixin
    final TokenizerOptions tokenizer = new TokenizerOptions();
    @Option(names = "--corpus-from-sources", description = "Build a byte-level corpus from the text files under a directory.")
    Path corpus;
    @Option(names = "--split", description = "Train, validation and test weights. Default: ${DEFAULT-VALUE}.")
    String split = "969,30,1";
    @Option(names = "--reset-position-ids", description = "Restart the position ids after each end-of-document token"
            + " of a sample.")
    boolean resetPositionIds;
    @Option(names = "--reset-attention-mask", description = "No attention across end-of-document tokens: a sample's"
            + " documents are packed sequences (each EOD in the document it ends).")
    boolean resetAttentionMask;
    @Option(names = "--eod-mask-loss", description = "Loss weight 0 at every position whose input token is an"
            + " end-of-document token.")
    boolean eodMaskLoss;
    @Option(names = "--save", description = "Checkpoint directory.")
    Path save;
    @Option(names = "--load", description = "Resume from the latest checkpoint here (a missing or empty directory starts from scratch).")
    Path load;
    @Option(names = "--load-hf", description = "Start from this Hugging Face checkpoint (config.json + safetensors): its "
            + "config gives the model's shape, norms, positions, dropout and vocabulary (the model-shape flags and "
            + "--vocab-size are not used); --load, when it holds a checkpoint, still takes precedence.")
    Path loadHf;
    /** {@link #hfConfig()}'s config.json, read once, and the {@code --load-hf} directory it was read from. */
    private HfConfig hfConfig;
    private Path hfConfigPath;
    @Option(names = "--save-hf", description = "After training, write the model here as a Hugging Face directory "
            + "(config.json + model.safetensors) that transformers loads.")
    Path saveHf;
    @Mixin
    final LoraOptions lora = new LoraOptions();
    @Mixin
    final Fp8Options fp8 = new Fp8Options();
    @Mixin
    final SftOptions sft = new SftOptions();
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
    @Option(names = "--cpu-threads", description = "libtorch's intra-op threads per operation on the CPU (default:"
            + " -Dai.djl.pytorch.num_threads or OMP_NUM_THREADS when set, else the cores divided by the ranks sharing"
            + " them, at least 1, so that in-JVM ranks do not oversubscribe the cores; the run's first lines say what"
            + " was chosen).")
    Integer cpuThreads;
    @Option(names = "--distributed-timeout-minutes", description = "How long a collective or a peer may stall before the run fails. Default: ${DEFAULT-VALUE}.")
    double timeoutMinutes = 10;
    @Option(names = "--cpu-initialization", description = "Initialise weights on the CPU even when training on a GPU.")
    boolean cpuInitialization;

    // flags of Megatron-LM's example scripts (GPT-3, LLaMA 3, Mixtral): implemented, accepted without effect, or
    // refused with one line (RefusedMegatronFlags); docs/megatron-flags.md lists them
    @Option(names = "--init-method-std", description = "Standard deviation of the normal initialisation of the weights;"
            + " the output projections (attention linear_proj, MLP linear_fc2) use it / sqrt(2 x --num-layers), as"
            + " Megatron does. Default: ${DEFAULT-VALUE}.")
    double initMethodStd = 0.02;
    @Option(names = "--kv-channels", description = "Width of one attention head (0: --hidden-size / --num-attention-heads)."
            + " Default: ${DEFAULT-VALUE}.")
    int kvChannels = 0;
    @Option(names = "--group-query-attention", description = "Grouped-query attention with --num-query-groups key/value"
            + " heads (Megatron's default of 1 when --num-query-groups is not given). mcore4j also honours"
            + " --num-query-groups without this flag (Megatron ignores it then).")
    boolean groupQueryAttention;
    @Option(names = "--qk-layernorm", description = "Normalise each query and key head over its channels (the"
            + " --normalization kind, weights shared by the heads) before the rotary embedding, as Megatron-Core's"
            + " qk_layernorm (Qwen3, OLMo 2).")
    boolean qkLayernorm;
    @Mixin
    final LayerVariantFlags layerVariants = new LayerVariantFlags();
    @Mixin
    final MlaFlags mla = new MlaFlags();
    @Option(names = "--mtp-num-layers", description = "Multi-token prediction (DeepSeek-V3): this many extra depths, each"
            + " predicting one token further ahead, their mean loss added to the training loss's gradient and logged as"
            + " 'mtp_<k> loss'. One pipeline stage, without context parallelism or packed documents. Default: none.")
    Integer mtpNumLayers;
    @Option(names = "--mtp-loss-scaling-factor", description = "Weight of the multi-token prediction depths' mean loss."
            + " Default: ${DEFAULT-VALUE}.")
    double mtpLossScalingFactor = TransformerConfig.MtpSettings.DEFAULT_LOSS_SCALING_FACTOR;
    @Option(names = "--rotary-base", description = "RoPE base (theta). Default: ${DEFAULT-VALUE}.")
    double rotaryBase = 10000;
    @Option(names = "--rotary-percent", description = "Fraction of each head's channels that RoPE rotates. Default: ${DEFAULT-VALUE}.")
    double rotaryPercent = 1.0;
    @Option(names = "--no-position-embedding", description = "Megatron's deprecated flag: accepted with"
            + " --position-embedding-type rope (which has no learned position embedding), refused otherwise.")
    boolean noPositionEmbedding;
    @Option(names = "--transformer-impl", description = "${COMPLETION-CANDIDATES}: transformer_engine is mcore4j's fused"
            + " path (the --attention-backend given; auto: libtorch's fused attention); local composes attention from"
            + " tensor ops (--attention-backend unfused), as Megatron's local spec does. No Transformer Engine is"
            + " involved. Default: ${DEFAULT-VALUE}.")
    TransformerImpl transformerImpl = TransformerImpl.transformer_engine;
    @Option(names = "--use-flash-attn", description = "Megatron's older name for --attention-backend flash.")
    boolean useFlashAttn;
    @Option(names = "--use-mcore-models", description = "Accepted without effect: mcore4j's models are Megatron-Core's (as"
            + " in Megatron-LM today, where the flag is deprecated).")
    boolean useMcoreModels;
    @Option(names = "--lr-warmup-fraction", description = "Warmup as a fraction of --lr-decay-iters (instead of"
            + " --lr-warmup-iters); it must give a whole number of iterations.")
    Double lrWarmupFraction;
    @Option(names = "--grad-reduce-in-bf16", description = "Reduce gradients in bfloat16 under --bf16 (the same as"
            + " --no-accumulate-allreduce-grads-in-fp32).")
    boolean gradReduceInBf16;
    @Option(names = "--dataloader-type", description = "${COMPLETION-CANDIDATES}: single reads the samples in order"
            + " (Megatron's pretraining sampler); cyclic gives each data-parallel rank its own part of the samples in a"
            + " random order per epoch and starts a new epoch when it runs out (Megatron's random sampler with data"
            + " sharding; the order is mcore4j's, not PyTorch's). Megatron's external is not offered."
            + " Default: ${DEFAULT-VALUE}.")
    DataloaderKind dataloaderType = DataloaderKind.single;
    @Option(names = "--data-cache-path", description = "Directory for the dataset's index files and, with --sft, the"
            + " tokenized conversations (default: next to each dataset's files).")
    Path dataCachePath;
    @Option(names = "--save-retain", description = "Complete checkpoints kept in --save: the newest N (0: all, as"
            + " Megatron, which deletes none unless --save-retain-interval). Default: ${DEFAULT-VALUE}.")
    int saveRetain = 2;
    // accepted without effect: Megatron's kernel, loader and logging choices that do not change what is computed
    @Option(names = "--no-masked-softmax-fusion", description = "Accepted without effect: mcore4j picks its attention kernels"
            + " (--attention-backend).")
    boolean noMaskedSoftmaxFusion;
    @Option(names = "--cross-entropy-loss-fusion", description = "Accepted without effect: mcore4j's vocabulary-parallel"
            + " cross-entropy is fused where a kernel exists.")
    boolean crossEntropyLossFusion;
    @Option(names = "--no-create-attention-mask-in-dataloader", description = "Accepted without effect: mcore4j's loader"
            + " never builds an attention mask (attention is causal).")
    boolean noAttentionMaskInDataloader;
    @Option(names = "--no-mmap-bin-files", description = "Accepted without effect: mcore4j memory-maps the .bin files.")
    boolean noMmapBinFiles;
    @Option(names = "--manual-gc", description = "Accepted without effect: Python's garbage collector; the JVM's runs on its own.")
    boolean manualGc;
    @Option(names = "--log-throughput", description = "Accepted without effect: throughput (tokens/s, TFLOP/s per rank) is"
            + " always logged.")
    boolean logThroughput;
    @Option(names = "--num-workers", description = "Accepted without effect: mcore4j reads samples in the training thread,"
            + " not in loader processes.")
    int numWorkers = 2;
    @Option(names = "--empty-unused-memory-level", description = "Accepted without effect: PyTorch's cache emptying.")
    int emptyUnusedMemoryLevel;
    @Mixin
    final RefusedMegatronFlags refused = new RefusedMegatronFlags();

    /** What {@link #tokenVocabulary()} read from the tokenizer; null until then. */
    private TokenVocabulary derivedVocabulary;

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

    /**
     * @return --ddp-bucket-size, or Megatron's default where it is not given: the larger of 40,000,000 and 1,000,000
     *     per data-parallel (times context-parallel) rank, so that each rank's piece stays large enough for NCCL's
     *     bandwidth
     */
    long ddpBucketSize() {
        if (ddpBucketSize != null) {
            return ddpBucketSize;
        }
        int model = layout.tensorParallel() * layout.pipelineParallel();
        return Math.max(40_000_000L, 1_000_000L * Math.max(1, layout.worldSize() / model));
    }

    /** @return --tensor-model-parallel-size x --context-parallel-size x --pipeline-model-parallel-size */
    public int modelParallelSize() {
        return layout.tensorParallel() * contextParallel * layout.pipelineParallel();
    }

    /** @return --seq-length */
    public int seqLength() {
        return seqLength;
    }

    /** @return the attention kind in effect: --attention-backend, after --use-flash-attn and --transformer-impl */
    public AttentionKind attentionBackend() {
        AttentionKind kind = attentionBackend;
        if (useFlashAttn) {
            if (kind != AttentionKind.auto && kind != AttentionKind.flash) {
                throw new IllegalArgumentException("--use-flash-attn asks for --attention-backend flash but"
                        + " --attention-backend is " + kind + " (give one of them)");
            }
            kind = AttentionKind.flash;
        }
        if (transformerImpl == TransformerImpl.local) {
            if (kind == AttentionKind.flash || kind == AttentionKind.fused) {
                throw new IllegalArgumentException("--transformer-impl local composes attention from tensor ops but "
                        + (useFlashAttn ? "--use-flash-attn" : "--attention-backend " + kind) + " asks for the fused"
                        + " kernel (use --transformer-impl transformer_engine, or drop it)");
            }
            kind = kind == AttentionKind.auto ? AttentionKind.unfused : kind;
        }
        return kind;
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
        refused.check();
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
        if (vocabSize != null) {
            positive("--vocab-size", vocabSize);
        }
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
        atLeastZero("--num-experts", moe.numExperts());
        atLeastZero("--kv-channels", kvChannels);
        atLeastZero("--save-retain", saveRetain);
        checkMegatronScriptFlags();
        if (kvChannels == 0 && hiddenSize % numAttentionHeads != 0) {
            throw new IllegalArgumentException("--hidden-size " + hiddenSize + " is not divisible by --num-attention-heads "
                    + numAttentionHeads);
        }
        int sources = (mockData ? 1 : 0) + (dataPath.isEmpty() ? 0 : 1) + (corpus != null ? 1 : 0);
        if (sources != 1) {
            throw new IllegalArgumentException("give exactly one of --data-path, --mock-data and --corpus-from-sources (got "
                    + sources + ")");
        }
        TokenVocabulary vocabulary = tokenVocabulary();
        if (corpus != null && tokenizer.type() != null && tokenizer.type() != PreprocessOptions.TokenizerType.BYTE_LEVEL) {
            throw new IllegalArgumentException("--corpus-from-sources builds a byte-level corpus; it takes --tokenizer-type"
                    + " ByteLevel or none, not " + tokenizer.type().argument());
        }
        if (loadHf != null && tokenizer.type() != null && vocabulary.size() > hfConfig().vocabSize()) {
            throw new IllegalArgumentException("--tokenizer-type " + tokenizer.type().argument() + " has " + vocabulary.size()
                    + " ids but --load-hf " + loadHf + " has a vocab_size of " + hfConfig().vocabSize());
        }
        if (moe.numExperts() == 0 && layout.expertParallel() > 1) {
            throw new IllegalArgumentException("--expert-model-parallel-size " + layout.expertParallel() + " needs --num-experts");
        }
        if (overrideScheduler && useCheckpointScheduler) {
            throw new IllegalArgumentException("--override-opt-param-scheduler and --use-checkpoint-opt_param-scheduler"
                    + " exclude each other");
        }
        checkMegatronFsdp();
        checkOptimizerOffload();
        checkOverlapParamGather();
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
        checkRanges();
        if (trainsHere) {
            sft.check(this);
            PathFlags.check(this);
        }
        if (trainsHere && loadHf == null) {
            MemoryFloor.check(this, MemoryFloor.ofFlags(this), () -> MemoryFloor.onCpu(this));
        }
        TransformerConfig model = model();
        model.validateMtpLayout(layout.pipelineParallel(), contextParallel);
        if (model.mtp() != null && resetAttentionMask) {
            throw new IllegalArgumentException("--mtp-num-layers " + model.mtp().numLayers() + " with --reset-attention-mask:"
                    + " the depths do not shift packed documents (each document's tokens would run into the next's)");
        }
        if (trainsHere && loadHf != null) {
            MemoryFloor.check(this, MemoryFloor.of(model, "--load-hf " + loadHf), () -> MemoryFloor.onCpu(this));
        }
        long decay = lrDecayIters > 0 ? lrDecayIters : trainIters;
        long warmup = warmupIterations(decay);
        int layersPerChunk = model.numLayers() / (layout.pipelineParallel() * virtualStages);
        if (recomputeNumLayers != null && layersPerChunk > 0 && recomputeNumLayers > layersPerChunk) {
            throw new IllegalArgumentException("--recompute-num-layers " + recomputeNumLayers + " must be between 1 and the "
                    + layersPerChunk + " layers of a pipeline stage" + (virtualStages > 1 ? " (virtual stage)" : ""));
        }
        OptimizerConfig optimizerConfig = OptimizerConfig.builder()
                .algorithm(optimizer == OptimizerKind.sgd ? OptimizerConfig.Algorithm.SGD : OptimizerConfig.Algorithm.ADAMW)
                .lr(lr).beta1(adamBeta1).beta2(adamBeta2).eps(adamEps).weightDecay(weightDecay).clipGrad(clipGrad)
                .precision(Precision.of(fp16, bf16)).useDistributedOptimizer(useDistributedOptimizer).fusedAdam(fusedAdam)
                .dataParallelShardingStrategy(shardingStrategy())
                .gradReduceInFp32(gradReduceInFp32 && !gradReduceInBf16).overlapGradReduce(overlapGradReduce)
                .averageInCollective(ddpAverageInCollective)
                // under --auto-layout the planner decides the distributed optimizer: without it nothing is gathered
                .overlapParamGather(overlapParamGather && useDistributedOptimizer)
                .bucketSizeBytes(4 * ddpBucketSize()).optimizerCpuOffload(optimizerCpuOffload)
                .optimizerOffloadFraction(optimizerOffloadFraction).initialLossScale(initialLossScale)
                .minLossScale(minLossScale).lossScaleWindow(lossScaleWindow).hysteresis(hysteresis).build();
        LearningRateSchedule schedule;
        try {
            schedule = new LearningRateSchedule(lr, minLr, warmup, decay,
                    lrDecayStyle.style);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException("--lr " + lr + ", --min-lr " + minLr + ", --lr-warmup-iters " + warmup
                    + ", --lr-decay-iters " + decay + ": " + e.getMessage(), e);
        }
        CheckpointConfig checkpoint = new CheckpointConfig(save, load, saveInterval,
                saveRetain == 0 ? Integer.MAX_VALUE : saveRetain,
                overrideScheduler ? CheckpointConfig.SchedulerOnResume.OVERRIDE
                        : useCheckpointScheduler ? CheckpointConfig.SchedulerOnResume.USE_CHECKPOINT
                        : CheckpointConfig.SchedulerOnResume.CHECK, exitOnMissingCheckpoint);
        TrainingConfig training = new TrainingConfig(trainIters, schedule, weightDecay, logInterval, evalInterval,
                evalIters, checkpoint, seed);
        AttentionBackend attention = attentionBackend().backend;
        checkAttentionMemory(model, attention);
        LoraConfig loraConfig = lora.config();
        if (loraConfig != null && load != null && loadHf == null) {
            // a LoRA checkpoint holds the adapters alone: resuming it on freshly initialised base weights would train
            // on the wrong model without a word
            throw new IllegalArgumentException("--peft lora with --load " + load + " needs --load-hf (the base model's"
                    + " weights): a LoRA checkpoint holds the adapters alone");
        }
        return new GptTrainingSetup(model, attention, layout.tensorParallel(), layout.pipelineParallel(), virtualStages, layout.expertParallel(),
                contextParallel, optimizerConfig, microBatchSize, globalBatchSize, seqLength, training, seed, !cpuInitialization,
                dataloaderType.type, cudaGraph()).withLora(loraConfig).withDocumentMasking(documentMasking())
                .withPackedSamples(sft.packs());
    }

    /** --reset-position-ids, --reset-attention-mask and --eod-mask-loss with the tokenizer's end-of-document id. */
    private DocumentMasking documentMasking() {
        if (!resetPositionIds && !resetAttentionMask && !eodMaskLoss) {
            return DocumentMasking.NONE;
        }
        return new DocumentMasking(endOfDocument().orElse(-1), resetPositionIds, resetAttentionMask, eodMaskLoss);
    }

    /** --cuda-graph-impl, --cuda-graph-scope and --cuda-graph-warmup-steps as the step's graph setting. */
    private CudaGraphConfig cudaGraph() {
        if (cudaGraphWarmupSteps < 1) {
            throw new IllegalArgumentException("--cuda-graph-warmup-steps " + cudaGraphWarmupSteps + " must be at least 1");
        }
        switch (cudaGraphImpl) {
            case "none" -> {
                if (!cudaGraphScope.isEmpty()) {
                    throw new IllegalArgumentException("--cuda-graph-scope " + String.join(" ", cudaGraphScope)
                            + " has no effect without --cuda-graph-impl local");
                }
                return CudaGraphConfig.NONE;
            }
            case "local" -> {
                if (!cudaGraphScope.equals(List.of("full_iteration"))) {
                    throw new IllegalArgumentException("--cuda-graph-scope " + (cudaGraphScope.isEmpty() ? "(none: Megatron's"
                            + " per-layer graphs)" : String.join(" ", cudaGraphScope)) + ": mcore4j captures full_iteration"
                            + " only (every micro-batch's forward and backward of a step); give --cuda-graph-scope full_iteration");
                }
                if (hiddenDropout > 0 || attentionDropout > 0) {
                    throw new IllegalArgumentException("--cuda-graph-impl local needs --hidden-dropout 0 and --attention-dropout 0"
                            + " for now (they are " + hiddenDropout + " and " + attentionDropout + "): a replayed graph"
                            + " would repeat the captured step's dropout masks");
                }
                if (moe.numExperts() > 0) {
                    moe.checkCapturable();
                }
                if (fp8.enabled() && "tensorwise".equals(fp8.recipe)) {
                    throw new IllegalArgumentException("--cuda-graph-impl local takes --fp8-format only with"
                            + " --fp8-recipe delayed (not tensorwise): a graph replays the weights' casts into cached"
                            + " float8 copies, which tensorwise scaling re-allocates with each step's scale");
                }
                return CudaGraphConfig.fullIteration(cudaGraphWarmupSteps);
            }
            default -> throw new IllegalArgumentException("--cuda-graph-impl " + cudaGraphImpl + " is not one of none, local"
                    + (cudaGraphImpl.equals("transformer_engine") ? " (mcore4j has no Transformer Engine)" : ""));
        }
    }

    /** The values of the Megatron script flags that are checked on their own (one line naming the flag). */
    private void checkMegatronScriptFlags() {
        if (!(initMethodStd > 0)) {
            throw new IllegalArgumentException("--init-method-std " + initMethodStd + " must be positive");
        }
        if (!(rotaryPercent > 0 && rotaryPercent <= 1)) {
            throw new IllegalArgumentException("--rotary-percent " + rotaryPercent + " must be in (0, 1]");
        }
        if (!(rotaryBase > 0)) {
            throw new IllegalArgumentException("--rotary-base " + rotaryBase + " must be positive");
        }
        if (noPositionEmbedding && positionEmbedding != PositionEmbeddingKind.rope) {
            // Megatron's own check, in its words
            throw new IllegalArgumentException("--no-position-embedding is deprecated, use --position-embedding-type"
                    + " (it is " + positionEmbedding + ")");
        }
        attentionBackend(); // --use-flash-attn and --transformer-impl against --attention-backend
        // Megatron asserts sequence parallelism after turning it off at TP 1
        if (tpCommOverlap && !sequenceParallel) {
            throw new IllegalArgumentException("--tp-comm-overlap overlaps the sequence-parallel all-gathers and"
                    + " reduce-scatters with the GEMMs: it needs --sequence-parallel");
        }
        if (tpCommOverlap && !sequenceParallelInEffect()) {
            throw new IllegalArgumentException("--tp-comm-overlap needs --tensor-model-parallel-size > 1 (got "
                    + layout.tensorParallel() + ", at which --sequence-parallel is off)");
        }
    }

    /** --lr-warmup-iters, or --lr-warmup-fraction of the decay iterations (a whole number of them). */
    private long warmupIterations(long decayIterations) {
        if (lrWarmupFraction == null) {
            return lrWarmupIters;
        }
        if (lrWarmupIters != 0) {
            throw new IllegalArgumentException("--lr-warmup-fraction " + lrWarmupFraction + " and --lr-warmup-iters "
                    + lrWarmupIters + " exclude each other (give one)");
        }
        double iterations = lrWarmupFraction * decayIterations;
        long whole = Math.round(iterations);
        if (!(lrWarmupFraction >= 0 && lrWarmupFraction <= 1) || Math.abs(iterations - whole) > 1e-6 * Math.max(1, iterations)) {
            throw new IllegalArgumentException(String.format(Locale.ROOT, "--lr-warmup-fraction %s of %d decay iterations"
                    + " is %.6g iterations; mcore4j warms up over whole iterations in [0, %d] (use --lr-warmup-iters)",
                    lrWarmupFraction, decayIterations, iterations, decayIterations));
        }
        return whole;
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

    /** @return the sharding strategy the flags select ({@code no_shard} without {@code --use-megatron-fsdp}) */
    DataParallelShardingStrategy shardingStrategy() {
        return useMegatronFsdp ? DataParallelShardingStrategy.of(dataParallelShardingStrategy)
                : DataParallelShardingStrategy.NO_SHARD;
    }

    /**
     * {@code --use-megatron-fsdp} and {@code --data-parallel-sharding-strategy}: a strategy without
     * the flag is refused (Megatron would ignore it), as are pipeline parallelism (Megatron FSDP does
     * not compose with it), and {@code optim_grads_params} with CUDA graphs (a replayed graph gathers nothing;
     * whether it needs full recompute depends on the device, which the model checks when the step is built);
     * every strategy that shards
     * the optimizer state turns the distributed optimizer on, as Megatron-Bridge does. With
     * {@code --auto-layout} the planner tries only the strategy given and picks a pipeline size and
     * recompute that suit it, so those two checks are left to it.
     */
    private void checkMegatronFsdp() {
        DataParallelShardingStrategy strategy = DataParallelShardingStrategy.of(dataParallelShardingStrategy);
        if (!useMegatronFsdp) {
            if (strategy != DataParallelShardingStrategy.NO_SHARD) {
                throw new IllegalArgumentException("--data-parallel-sharding-strategy " + strategy.flag()
                        + " needs --use-megatron-fsdp (not given)");
            }
            return;
        }
        if (strategy.shardsParameters() && !"none".equals(cudaGraphImpl)) {
            throw new IllegalArgumentException("--data-parallel-sharding-strategy optim_grads_params (ZeRO-3) does not"
                    + " compose with --cuda-graph-impl " + cudaGraphImpl + ": a replayed graph gathers no weights");
        }
        if (strategy.shardsOptimizerState()) {
            useDistributedOptimizer = true;
        }
        if (autoLayout) {
            return; // the planner tries only this strategy and chooses PP and recompute to fit it (AutoLayout)
        }
        if (layout.pipelineParallel() > 1) {
            throw new IllegalArgumentException("--use-megatron-fsdp does not compose with pipeline parallelism"
                    + " (--pipeline-model-parallel-size " + layout.pipelineParallel() + "), as in Megatron: use 1");
        }
    }

    /**
     * Megatron's assertions for {@code --overlap-param-gather}: it needs the distributed optimizer
     * (the only optimizer that gathers parameters) and {@code --overlap-grad-reduce}. With
     * {@code --auto-layout} the planner decides the distributed optimizer, so only the second is
     * checked then, and the flag does nothing where the planner leaves the optimizer unsharded.
     */
    private void checkOverlapParamGather() {
        if (!overlapParamGather) {
            return;
        }
        if (!useDistributedOptimizer && !autoLayout) {
            throw new IllegalArgumentException("--overlap-param-gather needs --use-distributed-optimizer (not given):"
                    + " only the distributed optimizer all-gathers the updated parameters, as Megatron asserts");
        }
        if (!overlapGradReduce) {
            throw new IllegalArgumentException("--overlap-param-gather needs --overlap-grad-reduce (not given), as"
                    + " Megatron asserts (\"Must use --overlap-param-gather with --overlap-grad-reduce\")");
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

    /**
     * Whether these flags describe a job to run on this machine (false for {@code plan}, which only
     * estimates: its paths need not exist here, nor its model fit this machine's memory).
     */
    boolean trainsHere = true;

    /**
     * The checks of values picocli parses but cannot judge: floating-point flags finite and in their
     * range (a NaN learning rate would train to NaN losses; an infinite timeout overflows the deadline),
     * counts and intervals non-negative, and the split weights parsed even without evaluation.
     */
    private void checkRanges() {
        atLeastZero("--lr", lr);
        atLeastZero("--min-lr", minLr);
        atLeastZero("--weight-decay", weightDecay);
        atLeastZero("--clip-grad", clipGrad);
        belowOne("--adam-beta1", adamBeta1);
        belowOne("--adam-beta2", adamBeta2);
        belowOne("--hidden-dropout", hiddenDropout);
        belowOne("--attention-dropout", attentionDropout);
        if (!(adamEps > 0) || Double.isInfinite(adamEps)) {
            throw new IllegalArgumentException("--adam-eps " + adamEps + " must be a positive finite number");
        }
        if (peakTflops != null && (!(peakTflops > 0) || peakTflops.isInfinite())) {
            throw new IllegalArgumentException("--peak-tflops " + peakTflops + " must be a positive finite number");
        }
        if (!(timeoutMinutes >= MIN_TIMEOUT_MINUTES && timeoutMinutes <= MAX_TIMEOUT_MINUTES)) {
            throw new IllegalArgumentException("--distributed-timeout-minutes " + timeoutMinutes + " must be a number of"
                    + " minutes from " + MIN_TIMEOUT_MINUTES + " (60 ms) to " + (long) MAX_TIMEOUT_MINUTES + " (about 19 months)");
        }
        atLeastZero("--save-interval", saveInterval);
        atLeastZero("--eval-interval", evalInterval);
        atLeastZero("--eval-iters", evalIters);
        moe.check(numLayers);
        if (ddpBucketSize != null) {
            positive("--ddp-bucket-size", ddpBucketSize);
        }
        if (ddpBucketSize != null && ddpBucketSize > Long.MAX_VALUE / 4) {
            throw new IllegalArgumentException("--ddp-bucket-size " + ddpBucketSize + " is too large (at most "
                    + Long.MAX_VALUE / 4 + " parameters)");
        }
        if (evalInterval > 0 && evalIters > 0 && globalBatchSize > (Integer.MAX_VALUE - 1) / evalIters) {
            throw new IllegalArgumentException("--eval-iters " + evalIters + " x --global-batch-size " + globalBatchSize
                    + " asks for more than " + (Integer.MAX_VALUE - 1) + " validation samples (the sample index holds at most that)");
        }
        if (numQueryGroups > 0 && numAttentionHeads % numQueryGroups != 0) {
            throw new IllegalArgumentException("--num-query-groups " + numQueryGroups + " does not divide --num-attention-heads "
                    + numAttentionHeads);
        }
        splitWeights();
    }

    /** Smallest {@code --distributed-timeout-minutes}: 60 ms, below which no collective can finish. */
    private static final double MIN_TIMEOUT_MINUTES = 0.001;
    /** Largest {@code --distributed-timeout-minutes}: deadlines are counted in nanoseconds of a {@code long}. */
    private static final double MAX_TIMEOUT_MINUTES = 1e6;

    static void atLeastZero(String flag, double value) {
        if (!(value >= 0) || Double.isInfinite(value)) {
            throw new IllegalArgumentException(flag + " " + value + " must be a finite number, at least 0");
        }
    }

    private static void belowOne(String flag, double value) {
        if (!(value >= 0 && value < 1)) {
            throw new IllegalArgumentException(flag + " " + value + " must be at least 0 and below 1");
        }
    }

    static long physicalMemoryBytes() {
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
        return parsed("--split", split, SplitWeights::parse);
    }

    /**
     * A flag's value parsed, its errors prefixed with the flag and the value.
     *
     * @param flag the flag's name
     * @param value the value given
     * @param parse the parser, which throws {@link IllegalArgumentException} for a bad value
     * @return the parsed value
     * @throws IllegalArgumentException {@code "<flag> <value>: <the parser's message>"}
     */
    static <T> T parsed(String flag, String value, Function<String, T> parse) {
        try {
            return parse.apply(value);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException(flag + " " + value + ": " + e.getMessage(), e);
        }
    }

    /** @return the Hugging Face config of {@code --load-hf}, or null without it; its config.json is read once */
    HfConfig hfConfig() {
        if (loadHf == null) {
            return null;
        }
        if (hfConfig == null || !hfConfigPath.equals(loadHf)) {
            hfConfig = HfConfig.readInput("--load-hf", loadHf, Set.of());
            hfConfigPath = loadHf;
        }
        return hfConfig;
    }

    /** @return the vocabulary of the tokens (the Hugging Face checkpoint's with {@code --load-hf}) */
    int tokenVocabSize() {
        return loadHf == null ? tokenVocabulary().size() : hfConfig().vocabSize();
    }

    /**
     * The end-of-document id of {@code --tokenizer-type} (Megatron's {@code tokenizer.eod}).
     *
     * @return the id; empty without a tokenizer type, or for a HuggingFace tokenizer that has none
     * @throws IllegalArgumentException as {@link #setup()} does for the tokenizer flags
     */
    public OptionalInt endOfDocument() {
        return tokenVocabulary().endOfDocument();
    }

    /**
     * The vocabulary before padding and the end-of-document id, as Megatron's {@code build_tokenizer} derives
     * them: from the tokenizer when {@code --tokenizer-type} is given, else {@code --vocab-size} (default 257).
     *
     * @param size ids the tokens use, before padding to {@code --make-vocab-size-divisible-by} x TP
     * @param endOfDocument the tokenizer's end-of-document id
     */
    record TokenVocabulary(int size, OptionalInt endOfDocument) {}

    /** The tokens' vocabulary, read from the tokenizer once (the flags do not change after parsing). */
    TokenVocabulary tokenVocabulary() {
        if (derivedVocabulary == null) {
            derivedVocabulary = deriveVocabulary();
        }
        return derivedVocabulary;
    }

    private TokenVocabulary deriveVocabulary() {
        PreprocessOptions.TokenizerType type = tokenizer.type();
        if (type == null) {
            return new TokenVocabulary(vocabSize != null ? vocabSize : DEFAULT_VOCAB_SIZE, OptionalInt.empty());
        }
        if (type == PreprocessOptions.TokenizerType.NULL && vocabSize == null) {
            throw new IllegalArgumentException("--tokenizer-type NullTokenizer needs --vocab-size (its ids are below it,"
                    + " and it is the end-of-document id)");
        }
        TokenizerSpec spec = tokenizer.spec(vocabSize != null ? vocabSize : 0);
        TokenVocabulary derived;
        try (Tokenizer t = spec.open()) {
            derived = new TokenVocabulary(t.vocabularySize(), t.endOfDocument());
        } catch (java.io.IOException e) {
            throw new IllegalArgumentException("--tokenizer-type " + type.argument() + ": cannot read " + e.getMessage(), e);
        }
        if (type != PreprocessOptions.TokenizerType.NULL && vocabSize != null && vocabSize != derived.size()) {
            throw new IllegalArgumentException("--vocab-size " + vocabSize + " disagrees with --tokenizer-type "
                    + type.argument() + ", whose vocabulary has " + derived.size() + " ids (leave --vocab-size out)");
        }
        return derived;
    }

    /**
     * @return --sequence-parallel where it has an effect: Megatron turns it off at
     *     --tensor-model-parallel-size 1 (with a warning, which {@link PretrainGpt} prints too)
     */
    boolean sequenceParallelInEffect() {
        return sequenceParallel && layout.tensorParallel() > 1;
    }

    /** @return the multi-token prediction of --mtp-num-layers and --mtp-loss-scaling-factor, or null without it */
    private TransformerConfig.MtpSettings mtp() {
        if (mtpNumLayers == null) {
            return null;
        }
        return new TransformerConfig.MtpSettings(mtpNumLayers, mtpLossScalingFactor);
    }

    private TransformerConfig model() {
        if (loadHf != null) {
            if (qkLayernorm && !hfConfig().transformerConfig().qkLayernorm()) {
                throw new IllegalArgumentException("--qk-layernorm with --load-hf " + loadHf + ": the model's shapes"
                        + " come from its config.json, whose architecture (" + hfConfig().architecture().className()
                        + ") has no query and key norms; drop the flag");
            }
            layerVariants.checkAgainst(hfConfig(), "--load-hf " + loadHf);
            if (normEpsilon != null && normEpsilon != hfConfig().transformerConfig().normEpsilon()) {
                throw new IllegalArgumentException("--norm-epsilon " + normEpsilon + " with --load-hf " + loadHf
                        + ": the model's norms come from its config.json, whose epsilon is "
                        + hfConfig().transformerConfig().normEpsilon() + "; drop the flag");
            }
            mla.refuseWithLoadHf("--load-hf " + loadHf);
            if (mtpNumLayers != null && mtpNumLayers > hfConfig().multiTokenPredictionLayers()) {
                throw new IllegalArgumentException("--mtp-num-layers " + mtpNumLayers + " with --load-hf " + loadHf
                        + ": its config.json has " + hfConfig().multiTokenPredictionLayers() + " multi-token prediction"
                        + " layers (" + hfConfig().architecture().className() + (hfConfig().architecture()
                        == HfArchitecture.DEEPSEEK_V3 ? ", num_nextn_predict_layers" : "") + ")");
            }
            // the checkpoint's shapes; precision, sequence parallelism, the context-parallel exchange and recompute
            // stay the run's choice
            return recompute(hfConfig().transformerConfig(vocabDivisor, layout.tensorParallel(),
                    Precision.of(fp16, bf16).paramDtype()).toBuilder().sequenceParallel(sequenceParallelInEffect())
                    .tpCommOverlap(tpCommOverlap).gradientAccumulationFusion(!noGradientAccumulationFusion)
                    .cpCommType(cpCommType.type)
                    .hierarchicalContextParallelSizes(hierarchicalContextParallelSizes).fp8(fp8Config())).mtp(mtp()).build();
        }
        // Megatron's padding to a multiple of divisor x TP; padded rows are never targets
        int vocab = Vocab.padded(tokenVocabulary().size(), vocabDivisor, layout.tensorParallel());
        TransformerConfig.Builder b = TransformerConfig.builder(numLayers, hiddenSize, numAttentionHeads, vocab)
                .maxSequenceLength(maxPositionEmbeddings == 0 ? seqLength : maxPositionEmbeddings)
                .dropout(hiddenDropout, attentionDropout)
                .initStd(initMethodStd)
                .rotary(rotaryBase, rotaryPercent)
                .sequenceParallel(sequenceParallelInEffect())
                .tpCommOverlap(tpCommOverlap)
                .gradientAccumulationFusion(!noGradientAccumulationFusion)
                .tiedEmbeddings(!untieEmbeddings)
                .dtype(Precision.of(fp16, bf16).paramDtype())
                .cpCommType(cpCommType.type)
                .hierarchicalContextParallelSizes(hierarchicalContextParallelSizes)
                .fp8(fp8Config());
        b.qkLayernorm(qkLayernorm);
        if (numQueryGroups > 0) {
            b.queryGroups(numQueryGroups);
        } else if (groupQueryAttention) {
            b.queryGroups(1); // Megatron's --num-query-groups default
        }
        if (kvChannels > 0) {
            b.kvChannels(kvChannels);
        }
        if (ffnHiddenSize > 0) {
            b.ffnHiddenSize(ffnHiddenSize);
        }
        if (swiglu) {
            b.activation(MlpActivation.SWIGLU);
        }
        layerVariants.apply(b, numLayers, swiglu);
        mla.apply(b, positionEmbedding == PositionEmbeddingKind.rope);
        double epsilon = normEpsilon == null ? 1e-5 : normEpsilon;
        if (!(epsilon > 0) || Double.isInfinite(epsilon)) {
            throw new IllegalArgumentException("--norm-epsilon " + normEpsilon + " must be positive and finite");
        }
        if (normalization == NormalizationKind.RMSNorm) {
            b.normalization(TransformerConfig.Normalization.RMS_NORM, epsilon);
        } else if (normEpsilon != null) {
            b.normalization(TransformerConfig.Normalization.LAYER_NORM, epsilon);
        }
        if (positionEmbedding == PositionEmbeddingKind.rope) {
            b.positionEmbedding(TransformerConfig.PositionEmbedding.ROPE);
        }
        if (disableBiasLinear) {
            b.addBiasLinear(false);
        }
        recompute(b);
        b.moe(moe.settings(ffnHiddenSize > 0 ? ffnHiddenSize : 4 * hiddenSize));
        b.mtp(mtp());
        try {
            return b.build();
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException("model flags: " + e.getMessage(), e);
        }
    }

    /**
     * The FP8 flags, checked against the flags they cannot be combined with.
     *
     * @return the FP8 settings, or null without {@code --fp8-format}
     */
    private io.mcore4j.core.fp8.Fp8Config fp8Config() {
        io.mcore4j.core.fp8.Fp8Config c = fp8.config(fp16, bf16);
        if (c != null && tpCommOverlap) {
            throw new IllegalArgumentException("--tp-comm-overlap cannot be combined with --fp8-format " + fp8.format
                    + " (the overlapped GEMMs run in the parameter dtype); drop one of them");
        }
        return c;
    }

    /**
     * Sets the recompute flags on a model, checked as Megatron checks them: full needs
     * {@code --recompute-method} and {@code --recompute-num-layers}, selective and none refuse both;
     * {@code --recompute-modules} only with selective, of the modules mcore4j implements.
     */
    private TransformerConfig.Builder recompute(TransformerConfig.Builder b) {
        if (recompute == RecomputeGranularity.full) {
            if (recomputeMethod == null) {
                throw new IllegalArgumentException("--recompute-granularity full needs --recompute-method uniform or block");
            }
            if (recomputeNumLayers == null) {
                throw new IllegalArgumentException("--recompute-granularity full needs --recompute-num-layers (1 to the layers"
                        + " of a pipeline stage)");
            }
            positive("--recompute-num-layers", recomputeNumLayers);
            b.recomputeFull(recomputeMethod.method, recomputeNumLayers);
        } else if (recomputeMethod != null) {
            throw new IllegalArgumentException("--recompute-method " + recomputeMethod + " applies only to"
                    + " --recompute-granularity full, got " + recompute);
        } else if (recomputeNumLayers != null) {
            throw new IllegalArgumentException("--recompute-num-layers " + recomputeNumLayers + " applies only to"
                    + " --recompute-granularity full, got " + recompute);
        }
        if (recompute != RecomputeGranularity.selective) {
            if (recomputeModules != null) {
                throw new IllegalArgumentException("--recompute-modules " + String.join(" ", recomputeModules)
                        + " applies only to --recompute-granularity selective, got " + recompute);
            }
            return recompute == RecomputeGranularity.none ? b.recompute(recompute.recompute) : b;
        }
        Set<TransformerConfig.RecomputeModule> modules = EnumSet.noneOf(TransformerConfig.RecomputeModule.class);
        for (String name : recomputeModules == null ? List.of("core_attn") : recomputeModules) {
            try {
                modules.add(TransformerConfig.RecomputeModule.ofMegatronName(name));
            } catch (IllegalArgumentException e) {
                throw new IllegalArgumentException("--recompute-modules " + name + ": " + e.getMessage(), e);
            }
        }
        if (modules.contains(TransformerConfig.RecomputeModule.MOE) && moe.numExperts() == 0 && loadHf == null) {
            throw new IllegalArgumentException("--recompute-modules moe recomputes mixture-of-experts layers, but there are"
                    + " none (--num-experts 0)");
        }
        if (modules.contains(TransformerConfig.RecomputeModule.MLP) && moe.numExperts() > 0
                && moe.layerPattern().count(numLayers) == numLayers) {
            throw new IllegalArgumentException("--recompute-modules mlp recomputes dense MLPs, but every layer is a mixture"
                    + " of experts (--moe-layer-freq " + moe.layerFreq + "): use moe");
        }
        return b.recomputeSelective(modules);
    }

    private static void positive(String flag, long value) {
        if (value < 1) {
            throw new IllegalArgumentException(flag + " " + value + " must be at least 1");
        }
    }

    static void atLeastZero(String flag, long value) {
        if (value < 0) {
            throw new IllegalArgumentException(flag + " " + value + " must not be negative");
        }
    }
}
