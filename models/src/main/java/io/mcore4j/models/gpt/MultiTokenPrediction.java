package io.mcore4j.models.gpt;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.autograd.Cast;
import io.mcore4j.core.nn.AbstractModule;
import io.mcore4j.core.nn.ModuleList;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.transformer.LayerSpec;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.models.transformer.Norm;
import io.mcore4j.models.transformer.TokenPositions;
import io.mcore4j.models.transformer.TransformerLayer;
import io.mcore4j.moe.MoeAuxLossTracker;
import io.mcore4j.moe.MoeLayer;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.tensorparallel.ColumnParallelLinear;
import io.mcore4j.tensorparallel.Mappings;

import java.util.ArrayList;
import java.util.List;
import java.util.function.UnaryOperator;

/**
 * Multi-token prediction's depths (DeepSeek-V3 §2.2; Megatron-Core's {@code MultiTokenPredictionBlock}), which
 * the last chunk of a GPT runs after its final norm when {@link TransformerConfig#mtp()} is set. Depth
 * {@code k = 1..D} takes the previous depth's output {@code h^(k-1)} ({@code h^0}: the main model's hidden states
 * after its final norm, as Megatron's decoder hands them over) and the embedding of the tokens shifted {@code k}
 * ahead (the last {@code k} positions take token 0, as Megatron's {@code roll_tensor} fills them), and computes
 * {@code h^k = final_layernorm(layer(eh_proj([enorm(emb); hnorm(h^(k-1))])))}; the shared output layer turns
 * {@code h^k} into logits for the labels shifted {@code k} ahead, whose loss mask is shifted likewise (its last
 * {@code k} positions count for nothing). Each depth's loss is {@code Σ(loss·mask) / max(1, Σ mask)}; the module
 * returns {@code mtpLossScalingFactor / D · Σ_k loss_k}, which the caller attaches to the main loss's gradient.
 *
 * <p>Keys (Megatron-Core's): {@code mtp.layers.<k-1>.enorm.weight}, {@code hnorm.weight}, {@code eh_proj.weight}
 * ([h, 2h], column-parallel, its input the concatenation [embedding; hidden]), {@code transformer_layer.*} (a
 * layer of the decoder's last layer's kind: MoE for DeepSeek-V3) and {@code final_layernorm.weight}. One pipeline
 * stage holds the whole model (the depths read the word embedding), without context parallelism and without packed
 * sequences; with sequence parallelism each depth's input and output are this rank's part of the sequence ({@link TransformerConfig#validate(io.mcore4j.parallel.ParallelDims)} refuses the
 * layouts; {@link #loss} the sequences).
 */
public final class MultiTokenPrediction extends AbstractModule {
    /** The depths' key prefix. */
    public static final String KEY = "mtp.layers.";

    private final ModelContext ctx;
    private final ModuleList<Depth> depths;
    private MoeAuxLossTracker tracker;

    /**
     * @param ctx the model context (its config's {@link TransformerConfig#mtp()} must be set)
     * @param spec which implementations the depths' transformer layers use
     * @throws IllegalArgumentException if the config sets no multi-token prediction
     */
    MultiTokenPrediction(ModelContext ctx, LayerSpec spec) {
        TransformerConfig c = ctx.config();
        if (c.mtp() == null) {
            throw new IllegalArgumentException("multi-token prediction needs TransformerConfig.mtp (--mtp-num-layers)");
        }
        this.ctx = ctx;
        this.depths = registerModule(KEY, new ModuleList<>());
        for (int k = 0; k < c.mtp().numLayers(); k++) {
            depths.put(k, new Depth(ctx, spec, KEY + k + "."));
        }
    }

    /**
     * Records each depth's (unscaled) loss for logging, under Megatron's names {@code "mtp_<k> loss"}: the
     * training loop reports them, averaged over data-parallel ranks, next to the routers' losses.
     *
     * @param losses the tracker the losses go to, or null for none
     */
    public void trackLosses(MoeAuxLossTracker losses) {
        this.tracker = losses;
        if (losses != null) {
            for (int k = 1; k <= depths.size(); k++) {
                losses.expect(lossName(k), 1, MoeAuxLossTracker.Reduction.AVERAGE_TP_DP_CP);
            }
        }
    }

    /**
     * @param depth a depth, from 1
     * @return Megatron's logged name of its loss, {@code "mtp_<depth> loss"}
     */
    public static String lossName(int depth) {
        return "mtp_" + depth + " loss";
    }

    /** @return the mixture-of-experts layers of the depths (for the step's expert-bias updates) */
    List<MoeLayer> moeLayers() {
        List<MoeLayer> out = new ArrayList<>();
        for (Depth d : depths) {
            if (d.layer.moe() != null) {
                out.add(d.layer.moe());
            }
        }
        return out;
    }

    /**
     * Runs every depth and returns their scaled loss.
     *
     * @param scope the micro-batch's scope (recording autograd)
     * @param hidden the main model's hidden states after its final norm, [s, b, h]
     * @param tokens the micro-batch's token ids [s, b]
     * @param labels its labels [s, b]
     * @param lossMask its loss mask [s, b], or null for all ones
     * @param positions its positions (packed sequences are refused)
     * @param embed the model's embedding: token ids and position ids [s, b] to [s, b, h]
     * @param logits the model's output layer: hidden states [s, b, h] to logits [s, b, V/TP]
     * @param lossPerToken the model's cross-entropy: logits and labels to the loss of every token [s, b]
     * @return {@code mtpLossScalingFactor / D · Σ_k loss_k}, a float32 scalar
     * @throws IllegalArgumentException for packed sequences
     */
    NDArray loss(AutogradScope scope, NDArray hidden, NDArray tokens, NDArray labels, NDArray lossMask,
                 TokenPositions positions, Embedder embed, UnaryOperator<NDArray> logits, LossPerToken lossPerToken) {
        if (positions.sequences() != null) {
            throw new IllegalArgumentException("--mtp-num-layers " + depths.size() + " does not shift packed sequences"
                    + " (each sequence's tokens would run into the next's); train without packed sequences");
        }
        NDManager m = scope.manager();
        long s = tokens.getShape().get(0);
        long b = tokens.getShape().get(1);
        // the caller's mask stays the caller's: shifting copies it
        NDArray mask = lossMask == null ? m.ones(new Shape(s, b), DataType.FLOAT32)
                : lossMask.getDataType() == DataType.FLOAT32 ? lossMask
                : Tensors.own(lossMask.toType(DataType.FLOAT32, false), m);
        NDArray ids = positions.positionIds() != null ? positions.positionIds()
                : m.arange(0, (int) s, 1, DataType.INT64).reshape(s, 1).repeat(1, b);
        NDArray shiftedTokens = tokens;
        NDArray shiftedLabels = labels;
        NDArray h = hidden;
        NDArray total = null;
        TransformerConfig.MtpSettings settings = ctx.config().mtp();
        for (int k = 1; k <= depths.size(); k++) {
            shiftedTokens = shiftLeft(shiftedTokens, m);
            shiftedLabels = shiftLeft(shiftedLabels, m);
            ids = shiftLeft(ids, m);
            mask = shiftLeft(mask, m);
            Depth depth = depths.get(k - 1);
            h = depth.forward(scope, h, embed.embed(shiftedTokens, ids), positions);
            NDArray losses = Cast.apply(scope, lossPerToken.apply(logits.apply(h), shiftedLabels), DataType.FLOAT32);
            NDArray count = mask.sum();
            NDArray loss = losses.mul(mask).sum().div(count.maximum(Tensors.scalar(1.0, count, m)));
            if (tracker != null) {
                tracker.record(lossName(k), 1, 1, loss, MoeAuxLossTracker.Reduction.AVERAGE_TP_DP_CP);
            }
            total = total == null ? loss : total.add(loss);
        }
        return total.mul(Tensors.scalar(settings.lossScalingFactor() / depths.size(), total, m));
    }

    /** {@code x} shifted one position earlier along the sequence (dim 0), its last position zero (Megatron's roll). */
    private static NDArray shiftLeft(NDArray x, NDManager m) {
        long s = x.getShape().get(0);
        NDArray rest = Tensors.narrow(x, 0, 1, s);
        NDArray zero = DataTypes.zeros(m, new Shape(1, x.getShape().get(1)), DataTypes.of(x), x.getDevice());
        return Tensors.own(rest.concat(zero, 0), m);
    }

    /** The model's embedding, as the depths call it. */
    @FunctionalInterface
    interface Embedder {
        /**
         * @param tokens token ids [s, b]
         * @param positionIds their positions [s, b]
         * @return embeddings [s, b, h]
         */
        NDArray embed(NDArray tokens, NDArray positionIds);
    }

    /** The model's cross-entropy over vocabulary-parallel logits. */
    @FunctionalInterface
    interface LossPerToken {
        /**
         * @param logits [s, b, V/TP]
         * @param labels [s, b]
         * @return the loss of every token [s, b]
         */
        NDArray apply(NDArray logits, NDArray labels);
    }

    /** One depth: its norms, projection, transformer layer and final norm. */
    private static final class Depth extends AbstractModule {
        private final Norm embeddingNorm;
        private final Norm hiddenNorm;
        private final ColumnParallelLinear projection;
        private final TransformerLayer layer;
        private final Norm finalNorm;
        private final Communicator tp;
        private final boolean sequenceParallel;

        Depth(ModelContext ctx, LayerSpec spec, String key) {
            TransformerConfig c = ctx.config();
            boolean dpReplica = ctx.groups().dpCp().rank() > 0;
            this.embeddingNorm = registerModule("enorm.", new Norm(ctx, c.hiddenSize()), dpReplica);
            this.hiddenNorm = registerModule("hnorm.", new Norm(ctx, c.hiddenSize()), dpReplica);
            String proj = key + "eh_proj.";
            // column-parallel (its input gathered along the sequence under sequence parallelism), its output gathered
            // along the width by forward: every TP rank's layer reads the whole width, as Megatron's depth does
            this.projection = registerModule("eh_proj.", ColumnParallelLinear.builder(2 * c.hiddenSize(), c.hiddenSize(),
                    ctx.groups().tp()).bias(false).gatherOutput(false).sequenceParallel(c.sequenceParallel())
                    .dtype(c.dtype()).manager(ctx.parameters()).name(proj)
                    .initializer(ctx.initializer(proj + "weight", c.initStd())).build(), dpReplica);
            this.tp = ctx.groups().tp();
            this.sequenceParallel = c.sequenceParallel();
            // Megatron builds the depth's layer from the decoder's last layer spec
            this.layer = registerModule("transformer_layer.", new TransformerLayer(ctx, spec, c.numLayers() - 1,
                    key + "transformer_layer."));
            this.finalNorm = registerModule("final_layernorm.", new Norm(ctx, c.hiddenSize()), dpReplica);
        }

        /** Hidden states and embeddings [s, b, h] ([s/TP, b, h] with sequence parallelism) to the depth's output. */
        NDArray forward(AutogradScope scope, NDArray hidden, NDArray embedded, TokenPositions positions) {
            NDArray joined = embeddingNorm.forward(scope, embedded).concat(hiddenNorm.forward(scope, hidden), 2);
            NDArray projected = Mappings.gatherFromTensorParallelRegion(scope, tp,
                    projection.forward(scope, Tensors.own(joined, scope.manager())).output());
            if (sequenceParallel) {
                projected = Mappings.scatterToSequenceParallelRegion(scope, tp, projected);
            }
            return finalNorm.forward(scope, layer.forward(scope, projected, positions));
        }
    }

    @Override
    public String toString() {
        return "MultiTokenPrediction(" + depths.size() + " depths)";
    }

    /** @return the number of depths */
    public int numDepths() {
        return depths.size();
    }
}
