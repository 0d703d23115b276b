package io.mcore4j.samples.pretrain;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;

/**
 * The flags of {@code pretrain-gpt}, named as in Megatron-LM, parsed and cross-checked. Unknown
 * flags, missing values and inconsistent combinations (a global batch not divisible by
 * micro-batch x data-parallel size, ...) raise {@link IllegalArgumentException} naming them.
 *
 * @param nproc ranks as threads in this JVM (0 when launched one process per rank)
 * @param tensorParallel --tensor-model-parallel-size
 * @param pipelineParallel --pipeline-model-parallel-size
 * @param layersPerVirtualStage --num-layers-per-virtual-pipeline-stage (0 = not interleaved)
 * @param sequenceParallel --sequence-parallel
 * @param numLayers --num-layers
 * @param hiddenSize --hidden-size
 * @param numAttentionHeads --num-attention-heads
 * @param numQueryGroups --num-query-groups (0 = heads)
 * @param ffnHiddenSize --ffn-hidden-size (0 = 4h)
 * @param seqLength --seq-length
 * @param maxPositionEmbeddings --max-position-embeddings (0 = seq length)
 * @param microBatchSize --micro-batch-size
 * @param globalBatchSize --global-batch-size
 * @param lr --lr
 * @param minLr --min-lr
 * @param lrWarmupIters --lr-warmup-iters
 * @param lrDecayIters --lr-decay-iters (0 = train iters)
 * @param lrDecayStyle --lr-decay-style (constant, linear, cosine)
 * @param weightDecay --weight-decay
 * @param clipGrad --clip-grad
 * @param trainIters --train-iters
 * @param fp16 --fp16
 * @param useDistributedOptimizer --use-distributed-optimizer
 * @param recompute --recompute-granularity (none, selective, full)
 * @param swiglu --swiglu
 * @param rmsNorm --normalization RMSNorm
 * @param rope --position-embedding-type rope
 * @param untieEmbeddings --untie-embeddings-and-output-weights
 * @param hiddenDropout --hidden-dropout
 * @param attentionDropout --attention-dropout
 * @param dataPath --data-path (weights and prefixes, Megatron's syntax), or empty
 * @param mockData --mock-data
 * @param corpus --corpus-from-sources DIR: build a byte-level corpus from a source tree (the demo's data)
 * @param vocabSize --vocab-size (mock data and byte-level corpora)
 * @param vocabDivisor --make-vocab-size-divisible-by: the vocabulary is padded to a multiple of this x TP
 * @param split --split
 * @param save --save directory, or null
 * @param load --load directory, or null
 * @param saveInterval --save-interval (0 = only at the end when --save is given)
 * @param evalInterval --eval-interval (0 = never)
 * @param evalIters --eval-iters
 * @param logInterval --log-interval
 * @param seed --seed
 * @param metricsDir --metrics-dir: JSONL metrics and the PNG loss curve (default: the save directory or runs/)
 * @param peakTflops --peak-tflops per rank, for MFU
 * @param timeoutSeconds --distributed-timeout-seconds
 * @param numExperts --num-experts (0 = dense MLPs)
 * @param moeTopK --moe-router-topk
 * @param moeFfnHiddenSize --moe-ffn-hidden-size (0 = --ffn-hidden-size)
 * @param moeLayerFrequency --moe-layer-freq
 * @param moeAuxLossCoeff --moe-aux-loss-coeff
 * @param moeDispatcher --moe-token-dispatcher-type (allgather, alltoall)
 * @param expertParallel --expert-model-parallel-size
 * @param fusedAdam Adam through libtorch's fused kernel (default; {@code --no-fused-adam} turns it off)
 * @param overlapGradReduce --overlap-grad-reduce: start data-parallel gradient reduction during the last backward
 * @param ddpBucketSize --ddp-bucket-size: parameters per data-parallel gradient bucket (default 10,000,000,
 *     i.e. the optimizer's 40 MB of float32 gradients)
 */
public record PretrainArgs(int nproc, int tensorParallel, int pipelineParallel, int layersPerVirtualStage,
                           boolean sequenceParallel, int numLayers, int hiddenSize, int numAttentionHeads,
                           int numQueryGroups, int ffnHiddenSize, int seqLength, int maxPositionEmbeddings,
                           int microBatchSize, int globalBatchSize, double lr, double minLr, int lrWarmupIters,
                           int lrDecayIters, String lrDecayStyle, double weightDecay, double clipGrad, int trainIters,
                           boolean fp16, boolean useDistributedOptimizer, String recompute, boolean swiglu,
                           boolean rmsNorm, boolean rope, boolean untieEmbeddings, double hiddenDropout,
                           double attentionDropout, List<String> dataPath, boolean mockData, Path corpus,
                           int vocabSize, int vocabDivisor, String split, Path save, Path load, int saveInterval, int evalInterval,
                           int evalIters, int logInterval, long seed, Path metricsDir, double peakTflops,
                           int timeoutSeconds, int numExperts, int moeTopK, int moeFfnHiddenSize,
                           int moeLayerFrequency, double moeAuxLossCoeff, String moeDispatcher, int expertParallel,
                           boolean fusedAdam, boolean overlapGradReduce, long ddpBucketSize) {

    private static final Set<String> SWITCHES = Set.of("--sequence-parallel", "--fp16", "--use-distributed-optimizer",
            "--swiglu", "--untie-embeddings-and-output-weights", "--mock-data", "--no-fused-adam", "--overlap-grad-reduce");

    /** Cross-checks the values. */
    public PretrainArgs {
        dataPath = List.copyOf(dataPath);
        int sources = (mockData ? 1 : 0) + (dataPath.isEmpty() ? 0 : 1) + (corpus != null ? 1 : 0);
        if (sources != 1) {
            throw new IllegalArgumentException("give exactly one of --data-path, --mock-data and --corpus-from-sources"
                    + " (got " + sources + ")");
        }
        if (microBatchSize < 1 || globalBatchSize < 1 || trainIters < 0 || seqLength < 1) {
            throw new IllegalArgumentException("--micro-batch-size " + microBatchSize + ", --global-batch-size "
                    + globalBatchSize + " and --seq-length " + seqLength + " must be positive; --train-iters "
                    + trainIters + " must not be negative");
        }
        if (!Set.of("constant", "linear", "cosine").contains(lrDecayStyle)) {
            throw new IllegalArgumentException("--lr-decay-style " + lrDecayStyle + " is not one of constant, linear, cosine");
        }
        if (!Set.of("none", "selective", "full").contains(recompute)) {
            throw new IllegalArgumentException("--recompute-granularity " + recompute + " is not one of none, selective, full");
        }
        if (!Set.of("allgather", "alltoall").contains(moeDispatcher)) {
            throw new IllegalArgumentException("--moe-token-dispatcher-type " + moeDispatcher + " is not allgather or alltoall");
        }
        if (numExperts == 0 && expertParallel > 1) {
            throw new IllegalArgumentException("--expert-model-parallel-size " + expertParallel + " needs --num-experts");
        }
        if (logInterval < 1) {
            throw new IllegalArgumentException("--log-interval " + logInterval + " must be positive");
        }
        if (ddpBucketSize < 1) {
            throw new IllegalArgumentException("--ddp-bucket-size " + ddpBucketSize + " must be positive");
        }
    }

    /**
     * The data-parallel size this run gets with {@code worldSize} ranks.
     *
     * @param worldSize ranks
     * @return world / (TP x PP)
     */
    public int dataParallel(int worldSize) {
        int mp = tensorParallel * pipelineParallel;
        if (worldSize % mp != 0) {
            throw new IllegalArgumentException("world size " + worldSize + " is not divisible by --tensor-model-parallel-size "
                    + tensorParallel + " x --pipeline-model-parallel-size " + pipelineParallel);
        }
        return worldSize / mp;
    }

    /**
     * Micro-batches per step on each data-parallel replica.
     *
     * @param worldSize ranks
     * @return global batch / (micro batch x DP)
     * @throws IllegalArgumentException if the global batch does not divide
     */
    public int microBatchesPerStep(int worldSize) {
        int dp = dataParallel(worldSize);
        if (globalBatchSize % (microBatchSize * dp) != 0) {
            throw new IllegalArgumentException("--global-batch-size " + globalBatchSize + " is not divisible by"
                    + " --micro-batch-size " + microBatchSize + " x data-parallel size " + dp);
        }
        return globalBatchSize / (microBatchSize * dp);
    }

    /**
     * Parses Megatron-LM-style flags.
     *
     * @param argv the command line
     * @return the arguments
     * @throws IllegalArgumentException naming an unknown flag, a missing value or a bad number
     */
    public static PretrainArgs parse(String... argv) {
        Map<String, String> v = new LinkedHashMap<>();
        List<String> dataPath = new ArrayList<>();
        for (int i = 0; i < argv.length; i++) {
            String flag = argv[i];
            if (!flag.startsWith("--")) {
                throw new IllegalArgumentException("unexpected argument \"" + flag + "\"; flags start with --");
            }
            if (SWITCHES.contains(flag)) {
                v.put(flag, "true");
                continue;
            }
            if (!DEFAULTS.containsKey(flag) && !flag.equals("--data-path")) {
                throw new IllegalArgumentException("unknown flag " + flag + "; known flags: " + known());
            }
            if (flag.equals("--data-path")) {
                while (i + 1 < argv.length && !argv[i + 1].startsWith("--")) {
                    dataPath.add(argv[++i]);
                }
                if (dataPath.isEmpty()) {
                    throw new IllegalArgumentException("--data-path needs at least one prefix");
                }
                continue;
            }
            if (i + 1 >= argv.length || argv[i + 1].startsWith("--")) {
                throw new IllegalArgumentException("flag " + flag + " needs a value");
            }
            v.put(flag, argv[++i]);
        }
        Flags f = new Flags(v);
        int seq = f.integer("--seq-length");
        int maxPos = f.integer("--max-position-embeddings");
        String norm = f.text("--normalization").toLowerCase(Locale.ROOT);
        if (!Set.of("layernorm", "rmsnorm").contains(norm)) {
            throw new IllegalArgumentException("--normalization " + norm + " is not LayerNorm or RMSNorm");
        }
        String pos = f.text("--position-embedding-type").toLowerCase(Locale.ROOT);
        if (!Set.of("learned_absolute", "rope").contains(pos)) {
            throw new IllegalArgumentException("--position-embedding-type " + pos + " is not learned_absolute or rope");
        }
        String save = f.text("--save");
        String load = f.text("--load");
        String corpus = f.text("--corpus-from-sources");
        String metrics = f.text("--metrics-dir");
        return new PretrainArgs(f.integer("--nproc"), f.integer("--tensor-model-parallel-size"),
                f.integer("--pipeline-model-parallel-size"), f.integer("--num-layers-per-virtual-pipeline-stage"),
                f.bool("--sequence-parallel"), f.integer("--num-layers"), f.integer("--hidden-size"),
                f.integer("--num-attention-heads"), f.integer("--num-query-groups"), f.integer("--ffn-hidden-size"),
                seq, maxPos == 0 ? seq : maxPos, f.integer("--micro-batch-size"), f.integer("--global-batch-size"),
                f.real("--lr"), f.real("--min-lr"), f.integer("--lr-warmup-iters"), f.integer("--lr-decay-iters"),
                f.text("--lr-decay-style"), f.real("--weight-decay"), f.real("--clip-grad"), f.integer("--train-iters"),
                f.bool("--fp16"), f.bool("--use-distributed-optimizer"), f.text("--recompute-granularity"),
                f.bool("--swiglu"), norm.equals("rmsnorm"), pos.equals("rope"),
                f.bool("--untie-embeddings-and-output-weights"), f.real("--hidden-dropout"),
                f.real("--attention-dropout"), dataPath, f.bool("--mock-data"),
                corpus.isEmpty() ? null : Path.of(corpus), f.integer("--vocab-size"), f.integer("--make-vocab-size-divisible-by"), f.text("--split"),
                save.isEmpty() ? null : Path.of(save), load.isEmpty() ? null : Path.of(load),
                f.integer("--save-interval"), f.integer("--eval-interval"), f.integer("--eval-iters"),
                f.integer("--log-interval"), f.longInteger("--seed"), metrics.isEmpty() ? null : Path.of(metrics),
                f.real("--peak-tflops"), f.integer("--distributed-timeout-seconds"), f.integer("--num-experts"),
                f.integer("--moe-router-topk"), f.integer("--moe-ffn-hidden-size"), f.integer("--moe-layer-freq"),
                f.real("--moe-aux-loss-coeff"), f.text("--moe-token-dispatcher-type"),
                f.integer("--expert-model-parallel-size"), !f.bool("--no-fused-adam"), f.bool("--overlap-grad-reduce"),
                f.longInteger("--ddp-bucket-size"));
    }

    private static final Map<String, String> DEFAULTS = defaults();

    private static Map<String, String> defaults() {
        Map<String, String> d = new LinkedHashMap<>();
        d.put("--nproc", "1");
        d.put("--tensor-model-parallel-size", "1");
        d.put("--pipeline-model-parallel-size", "1");
        d.put("--num-layers-per-virtual-pipeline-stage", "0");
        d.put("--sequence-parallel", "false");
        d.put("--num-layers", "4");
        d.put("--hidden-size", "64");
        d.put("--num-attention-heads", "4");
        d.put("--num-query-groups", "0");
        d.put("--ffn-hidden-size", "0");
        d.put("--seq-length", "64");
        d.put("--max-position-embeddings", "0");
        d.put("--micro-batch-size", "4");
        d.put("--global-batch-size", "16");
        d.put("--lr", "1e-3");
        d.put("--min-lr", "1e-4");
        d.put("--lr-warmup-iters", "0");
        d.put("--lr-decay-iters", "0");
        d.put("--lr-decay-style", "cosine");
        d.put("--weight-decay", "0.01");
        d.put("--clip-grad", "1.0");
        d.put("--train-iters", "100");
        d.put("--fp16", "false");
        d.put("--use-distributed-optimizer", "false");
        d.put("--recompute-granularity", "none");
        d.put("--swiglu", "false");
        d.put("--normalization", "LayerNorm");
        d.put("--position-embedding-type", "learned_absolute");
        d.put("--untie-embeddings-and-output-weights", "false");
        d.put("--hidden-dropout", "0.0");
        d.put("--attention-dropout", "0.0");
        d.put("--mock-data", "false");
        d.put("--corpus-from-sources", "");
        d.put("--vocab-size", "257");
        d.put("--make-vocab-size-divisible-by", "128");
        d.put("--split", "969,30,1");
        d.put("--save", "");
        d.put("--load", "");
        d.put("--save-interval", "0");
        d.put("--eval-interval", "0");
        d.put("--eval-iters", "2");
        d.put("--log-interval", "10");
        d.put("--seed", "1234");
        d.put("--metrics-dir", "");
        d.put("--peak-tflops", "989");
        d.put("--distributed-timeout-seconds", "120");
        d.put("--num-experts", "0");
        d.put("--moe-router-topk", "2");
        d.put("--moe-ffn-hidden-size", "0");
        d.put("--moe-layer-freq", "1");
        d.put("--moe-aux-loss-coeff", "0.0");
        d.put("--moe-token-dispatcher-type", "allgather");
        d.put("--expert-model-parallel-size", "1");
        d.put("--no-fused-adam", "false");
        d.put("--overlap-grad-reduce", "false");
        d.put("--ddp-bucket-size", "10000000");
        return d;
    }

    private static String known() {
        List<String> names = new ArrayList<>(DEFAULTS.keySet());
        names.add("--data-path");
        return String.join(" ", names);
    }

    /** Typed access to flag values with defaults. */
    private record Flags(Map<String, String> values) {
        String text(String flag) {
            return values.getOrDefault(flag, DEFAULTS.get(flag));
        }

        int integer(String flag) {
            try {
                return Integer.parseInt(text(flag));
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException("flag " + flag + " needs an integer, got \"" + text(flag) + "\"");
            }
        }

        long longInteger(String flag) {
            try {
                return Long.parseLong(text(flag));
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException("flag " + flag + " needs an integer, got \"" + text(flag) + "\"");
            }
        }

        double real(String flag) {
            try {
                return Double.parseDouble(text(flag));
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException("flag " + flag + " needs a number, got \"" + text(flag) + "\"");
            }
        }

        boolean bool(String flag) {
            return Boolean.parseBoolean(text(flag));
        }
    }
}
