package io.mcore4j.samples.pretrain;

import ai.djl.engine.Engine;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.samples.launch.ParallelLayoutOptions;

import java.util.Locale;
import java.util.function.BooleanSupplier;

/**
 * A floor under the memory a pretrain-gpt run needs, computed from its flags before anything is
 * allocated, so that a model or a sequence far too large for the machine fails with one line naming
 * the flags instead of in an allocator (an {@link OutOfMemoryError} while drawing the weights,
 * libtorch's allocation failure, or a machine that swaps for hours). It is a floor, not an estimate: a
 * run it passes may still not fit (the planner's {@code --auto-layout} estimates that); a run it
 * refuses cannot fit. The rule:
 * <ul>
 *   <li><b>state</b>: a rank holds 1/(TP x PP) of the dense weights and 1/(TP x PP x EP) of the
 *       experts'; each parameter costs its weight and its gradient (4 bytes each, 2 under
 *       {@code --fp16}/{@code --bf16}; the gradient divided over the data-parallel ranks under
 *       {@code --data-parallel-sharding-strategy optim_grads}, both under {@code optim_grads_params}), plus with Adam 8 bytes of moments and under
 *       {@code --fp16}/{@code --bf16} a 4-byte float32 master weight, those two divided over the
 *       data-parallel ranks with {@code --use-distributed-optimizer};</li>
 *   <li><b>activations</b>: each of a rank's layers keeps its input for the backward pass (micro-batch
 *       x sequence/CP x hidden, the sequence also over TP with {@code --sequence-parallel}, even under
 *       full recompute), and the last stage its logits (micro-batch x sequence/CP x padded
 *       vocabulary/TP), both at the parameters' width;</li>
 *   <li>on the <b>CPU</b> the ranks of this process (launched: of this node, {@code LOCAL_WORLD_SIZE})
 *       share the machine's physical memory ({@code /proc/meminfo}); and each weight, drawn whole on
 *       the Java side (also on a GPU with {@code --cpu-initialization}), must fit in one Java array and
 *       in the JVM's heap ({@link Runtime#maxMemory()}). On a GPU the device's allocator is the check.</li>
 * </ul>
 * With {@code --auto-layout} the first check is the planner's (it picks a layout that fits or says
 * that none does); the heap check stays.
 * Sizes are computed in floating point, so no flag value overflows them.
 */
final class MemoryFloor {
    private static final double GB = 1e9;

    private MemoryFloor() {}

    /**
     * The model's sizes in elements.
     *
     * @param describe the flags (or checkpoint) that set them, for messages
     * @param parameters dense parameters of the whole model
     * @param expertParameters expert parameters of the whole model
     * @param largest elements of the largest weight
     * @param largestName that weight and the flags that size it
     * @param layers transformer layers
     * @param hidden hidden size
     * @param paddedVocab the padded vocabulary
     */
    record Shape(String describe, double parameters, double expertParameters, double largest, String largestName,
                 double layers, double hidden, double paddedVocab) {}

    /**
     * The shape the model flags give (not {@code --load-hf}), without building the model.
     *
     * @param a the flags, individually checked (positive sizes)
     * @return the shape
     */
    static Shape ofFlags(PretrainArgs a) {
        double h = a.hiddenSize;
        double heads = a.numAttentionHeads;
        double kv = h / heads;
        double groups = a.numQueryGroups > 0 ? a.numQueryGroups : heads;
        double ffn = a.ffnHiddenSize > 0 ? a.ffnHiddenSize : 4 * h;
        double multiple = (double) a.vocabDivisor * a.layout.tensorParallel();
        int tokens = a.tokenVocabulary().size(); // --vocab-size, or the tokenizer's
        double vocab = Math.ceil(tokens / multiple) * multiple;
        double positions = a.positionEmbedding == PretrainArgs.PositionEmbeddingKind.rope ? 0
                : a.maxPositionEmbeddings > 0 ? a.maxPositionEmbeddings : a.seqLength;
        double moeFfn = a.moe.ffnHiddenSize > 0 ? a.moe.ffnHiddenSize : ffn;
        String describe = String.format(Locale.ROOT, "--num-layers %d, --hidden-size %d, --ffn-hidden-size %s, --vocab-size %d"
                        + "%s%s%s", a.numLayers, a.hiddenSize, a.ffnHiddenSize > 0 ? String.valueOf(a.ffnHiddenSize) : "(4 x hidden)",
                tokens, vocab > 2.0 * tokens ? String.format(Locale.ROOT, " (padded to %.4g by"
                        + " --make-vocab-size-divisible-by %d)", vocab, a.vocabDivisor) : "",
                positions > 0 ? ", --seq-length " + a.seqLength : "",
                a.moe.numExperts() > 0 ? ", --num-experts " + a.moe.numExperts() : "");
        double moeLayers = a.moe.numExperts() > 0 ? a.moe.layerPattern().count(a.numLayers) : 0;
        return shape(describe, a.numLayers, h, (heads + 2 * groups) * kv, heads * kv, ffn, a.swiglu, vocab, positions,
                a.untieEmbeddings, a.moe.numExperts(), moeLayers, moeFfn, a.moe.sharedExpertFfnHiddenSize(),
                String.format(Locale.ROOT, "--vocab-size %d x --hidden-size %d", tokens, a.hiddenSize),
                String.format(Locale.ROOT, "--seq-length %d x --hidden-size %d", positions > 0 ? (long) positions : 0, a.hiddenSize),
                String.format(Locale.ROOT, "--ffn-hidden-size %s x --hidden-size %d", a.ffnHiddenSize > 0
                        ? String.valueOf(a.ffnHiddenSize) : "(4 x hidden)", a.hiddenSize));
    }

    /**
     * The shape of a built configuration ({@code --load-hf}'s).
     *
     * @param c the model
     * @param source where it came from, for messages
     * @return the shape
     */
    static Shape of(TransformerConfig c, String source) {
        double h = c.hiddenSize();
        double kv = c.kvChannels();
        TransformerConfig.MoeSettings moe = c.moe();
        String describe = String.format(Locale.ROOT, "%s (%d layers, hidden size %d, vocabulary %d)", source, c.numLayers(),
                c.hiddenSize(), c.vocabSize());
        return shape(describe, c.numLayers(), h, (c.numAttentionHeads() + 2.0 * c.numQueryGroups()) * kv,
                c.numAttentionHeads() * kv, c.ffnHiddenSize(), c.activation().isGated(), c.vocabSize(),
                c.usesRope() ? 0 : c.maxSequenceLength(), !c.tiedEmbeddings(), moe == null ? 0 : moe.numExperts(),
                moe == null ? 0 : moe.layers().count(c.numLayers()), moe == null ? 0 : moe.ffnHiddenSize(),
                moe == null ? 0 : moe.config().sharedExpertFfnHiddenSize(),
                source + "'s word embedding", source + "'s position embedding", source + "'s MLP");
    }

    private static Shape shape(String describe, double layers, double h, double qkv, double attentionOut, double ffn,
                               boolean swiglu, double vocab, double positions, boolean untied, double experts,
                               double moeLayers, double moeFfn, double sharedFfn, String embeddingName,
                               String positionName, String mlpName) {
        double gates = swiglu ? 2 : 1;
        double attention = h * qkv + attentionOut * h;
        double dense = layers * attention + (layers - moeLayers) * (gates + 1) * h * ffn
                + vocab * h * (untied ? 2 : 1) + positions * h + moeLayers * h * (experts + (gates + 1) * sharedFfn);
        double expert = moeLayers * experts * (gates + 1) * h * moeFfn;
        double largest = vocab * h;
        String largestName = embeddingName;
        if (positions * h > largest) {
            largest = positions * h;
            largestName = positionName;
        }
        if (gates * ffn * h > largest) {
            largest = gates * ffn * h;
            largestName = mlpName;
        }
        return new Shape(describe, dense, expert, largest, largestName, layers, h, vocab);
    }

    /**
     * Refuses a CPU run whose floor exceeds this machine's memory, or a weight that cannot be drawn
     * on the Java side.
     *
     * @param a the flags
     * @param s the model's shape
     * @param onCpu whether the run trains on the CPU (asked only when a limit is exceeded)
     * @throws IllegalArgumentException naming the flags, the bytes needed and the memory there is
     */
    static void check(PretrainArgs a, Shape s, BooleanSupplier onCpu) {
        int tp = a.layout.tensorParallel();
        int pp = a.layout.pipelineParallel();
        int cp = a.contextParallel;
        boolean launched = ParallelLayoutOptions.launched();
        int world = a.layout.worldSize();
        double dataParallel = Math.max(1, world / ((double) tp * pp * cp));
        boolean halfWidth = a.fp16 || a.bf16;
        double width = halfWidth ? 2 : 4;
        double optimizerBytes = (a.optimizer == PretrainArgs.OptimizerKind.adam ? 8 : 0) + (halfWidth ? 4 : 0);
        // weights (sharded between uses under optim_grads_params), gradients (sharded under optim_grads and
        // optim_grads_params) and optimizer state
        double weights = width / (a.shardingStrategy().shardsParameters() ? dataParallel : 1);
        double gradients = width / (a.shardingStrategy().shardsGradients() ? dataParallel : 1);
        double perParameter = weights + gradients + optimizerBytes / (a.useDistributedOptimizer ? dataParallel : 1);
        double parameters = s.parameters() / (tp * (double) pp)
                + s.expertParameters() / (tp * (double) pp * a.layout.expertParallel());
        double state = parameters * perParameter;
        double tokens = (double) a.microBatchSize * a.seqLength / cp;
        double layerInput = tokens / (a.sequenceParallel ? tp : 1) * s.hidden() * width;
        double activations = Math.ceil(s.layers() / pp) * layerInput + tokens * s.paddedVocab() / tp * width;
        double ranksHere = launched ? localWorldSize() : world;
        double needed = (state + activations) * ranksHere;
        long physical = PretrainArgs.physicalMemoryBytes();
        // --auto-layout: the planner chooses a layout that fits, or says that none does
        if (!a.autoLayout && physical > 0 && needed > physical && onCpu.getAsBoolean()) {
            String where = String.format(Locale.ROOT, "%.3g GB on each rank, %.3g GB for the %d rank%s sharing this machine,"
                    + " which has %.3g GB", (state + activations) / GB, needed / GB, (long) ranksHere, ranksHere == 1 ? "" : "s",
                    physical / GB);
            if (activations > state) {
                throw new IllegalArgumentException(String.format(Locale.ROOT, "--seq-length %d with --micro-batch-size %d"
                        + " (%s) needs at least %s for activations and state (use a shorter --seq-length or a smaller"
                        + " --micro-batch-size)", a.seqLength, a.microBatchSize, s.describe(), where));
            }
            throw new IllegalArgumentException(String.format(Locale.ROOT, "%s: about %.3g parameters need at least %s"
                    + " (%.0f bytes per parameter for weights, gradients and optimizer state; use smaller model flags or"
                    + " more tensor- or pipeline-parallel ranks)", s.describe(), s.parameters() + s.expertParameters(), where,
                    perParameter));
        }
        boolean overArray = s.largest() > Integer.MAX_VALUE - 8;
        boolean overHeap = 4 * s.largest() > Runtime.getRuntime().maxMemory();
        if ((overArray || overHeap) && (a.cpuInitialization || onCpu.getAsBoolean())) {
            throw new IllegalArgumentException(overArray
                    ? String.format(Locale.ROOT, "%s: the weight's %.4g elements are drawn whole on the Java side, more"
                            + " than one Java array holds (%d)", s.largestName(), s.largest(), Integer.MAX_VALUE - 8)
                    : String.format(Locale.ROOT, "%s: the weight's %.4g elements are drawn whole on the Java side and"
                            + " need %.3g GB of Java heap; this JVM may use %.3g GB (raise -Xmx)", s.largestName(),
                            s.largest(), 4 * s.largest() / GB, Runtime.getRuntime().maxMemory() / GB));
        }
    }

    /** @return the launcher's ranks on this node ({@code LOCAL_WORLD_SIZE}), 1 when it does not say */
    private static int localWorldSize() {
        try {
            return Math.max(1, Integer.parseInt(System.getenv().getOrDefault("LOCAL_WORLD_SIZE", "1").trim()));
        } catch (NumberFormatException e) {
            return 1;
        }
    }

    /**
     * Whether this run trains on the CPU: in-JVM ranks beyond one always do; otherwise unless
     * {@code MCORE4J_DEVICE} is {@code cpu}, CUDA devices make it a GPU run (as {@link PretrainGpt} decides).
     *
     * @param a the flags
     * @return true for a CPU run
     */
    static boolean onCpu(PretrainArgs a) {
        if (!ParallelLayoutOptions.launched() && a.layout.worldSize() > 1) {
            return true;
        }
        return System.getenv().getOrDefault("MCORE4J_DEVICE", "").equalsIgnoreCase("cpu")
                || Engine.getInstance().getGpuCount() == 0;
    }
}
