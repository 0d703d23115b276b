package io.mcore4j.models.gpt;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.contextparallel.ContextParallelSplit;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.nn.AbstractModule;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.transformer.Dropout;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.tensorparallel.VocabParallelEmbedding;

import java.util.Arrays;
import java.util.List;

/**
 * Word embeddings (vocab-parallel) plus learned absolute position embeddings, then dropout.
 * Output [s, b, h], or this rank's [s/TP, b, h] slice with sequence parallelism (the word
 * embedding reduce-scatters; the position embedding adds the matching rows). Under context
 * parallelism {@code s} is this rank's part of the sequence, and its learned position rows are
 * those of its tokens' global positions ({@link ContextParallelSplit#positions}).
 */
public final class GptEmbedding extends AbstractModule {
    /** Checkpoint key of the word embedding weight (shared with a tied output layer). */
    public static final String WORD_KEY = "embedding.word_embeddings.";
    private static final String POSITION_KEY = "embedding.position_embeddings.";

    private final ModelContext ctx;
    private final VocabParallelEmbedding word;
    private final Parameter position;

    /** @param ctx the model context */
    public GptEmbedding(ModelContext ctx) {
        TransformerConfig c = ctx.config();
        this.ctx = ctx;
        this.word = registerModule(WORD_KEY, VocabParallelEmbedding.builder(c.vocabSize(), c.hiddenSize(), ctx.groups().tp())
                .sequenceParallel(c.sequenceParallel())
                .initializer(ctx.initializer(WORD_KEY + "weight", c.initStd()))
                .dtype(c.dtype()).manager(ctx.parameters()).name(WORD_KEY).build());
        if (c.positionEmbedding() == TransformerConfig.PositionEmbedding.LEARNED_ABSOLUTE) {
            NDArray table = ctx.initializer(POSITION_KEY + "weight", c.initStd()).create(ctx.parameters(), new Shape(c.maxSequenceLength(), c.hiddenSize()), c.dtype());
            // every TP rank holds the whole table: rank 0's copy is the main replica
            this.position = registerParameter(POSITION_KEY, new Parameter("weight", table, Parameter.Partition.NONE,
                    c.sequenceParallel() ? Parameter.Kind.SEQUENCE_PARALLEL : Parameter.Kind.DENSE),
                    ctx.groups().tensorParallelRank());
        } else {
            this.position = null;
        }
    }

    /** @return the word embedding weight [V/TP, h] */
    public Parameter wordWeight() {
        return word.weight();
    }

    /**
     * @param scope the pass's scope
     * @param tokens token ids [s, b]
     * @return embeddings [s, b, h] or [s/TP, b, h]
     */
    public NDArray forward(AutogradScope scope, NDArray tokens) {
        return forward(scope, tokens, 0);
    }

    /**
     * Embeds tokens that sit at positions {@code positionOffset..} of their sequences (generation
     * continuing a cached sequence, without context parallelism).
     *
     * @param scope the pass's scope
     * @param tokens token ids [s, b]
     * @param positionOffset position of the first token
     * @return embeddings [s, b, h] or [s/TP, b, h]
     * @throws IllegalArgumentException if the positions run past the max sequence length
     */
    public NDArray forward(AutogradScope scope, NDArray tokens, long positionOffset) {
        return forward(scope, tokens, positionOffset, null);
    }

    /**
     * Embeds tokens at explicit positions (packed sequences, whose positions restart at each
     * sequence's start): the learned position rows are those of {@code positionIds}.
     *
     * @param scope the pass's scope
     * @param tokens token ids [s, b]
     * @param positionIds int64 [s, b] positions of the tokens (this rank's under context parallelism),
     *     or null for their positions in the sequence
     * @return embeddings [s, b, h] or [s/TP, b, h]
     * @throws IllegalArgumentException if {@code positionIds} is not shaped like the tokens
     */
    public NDArray forward(AutogradScope scope, NDArray tokens, NDArray positionIds) {
        if (positionIds != null && !positionIds.getShape().equals(tokens.getShape())) {
            throw new IllegalArgumentException("position ids of shape " + positionIds.getShape() + " for tokens of shape "
                    + tokens.getShape());
        }
        return forward(scope, tokens, 0, positionIds);
    }

    private NDArray forward(AutogradScope scope, NDArray tokens, long positionOffset, NDArray positionIds) {
        ContextParallelSplit split = ContextParallelSplit.of(ctx.groups().cp());
        if (position != null) {
            long s = split.sequenceLength(tokens.getShape().get(0));
            if (positionOffset + s > position.data().getShape().get(0)) {
                throw new IllegalArgumentException("sequence length " + (positionOffset + s) + " exceeds the max sequence length "
                        + position.data().getShape().get(0));
            }
        }
        // the sum saves nothing for backward: the word embeddings die with the inner frame unless a
        // Function refers to them, the undropped sum with the outer one
        return scope.frame(() -> Dropout.apply(scope, scope.frame(() -> embed(scope, tokens, split, positionOffset, positionIds)),
                ctx.config().hiddenDropout(), ctx.hiddenDropout()));
    }

    private NDArray embed(AutogradScope scope, NDArray tokens, ContextParallelSplit split, long positionOffset,
                          NDArray positionIds) {
        NDArray words = word.forward(scope, tokens);
        if (position == null) {
            return words;
        }
        long s = split.sequenceLength(tokens.getShape().get(0));
        long local = words.getShape().get(0);
        long start = ctx.config().sequenceParallel() ? local * ctx.groups().tensorParallelRank() : 0;
        if (positionIds != null) {
            // this rank's rows of the ids (its sequence-parallel slice), gathered from the table
            NDArray ids = Tensors.own(Tensors.narrow(positionIds, 0, start, start + local).reshape(-1), scope.manager());
            NDArray rows = Tensors.own(position.data().get(ids), scope.manager());
            return words.add(Tensors.own(rows.reshape(local, ids.size() / local, rows.getShape().get(1)), scope.manager()));
        }
        // this rank's rows: one run without context parallelism (from the generation offset), up to two (its chunks) with it
        long first = start + positionOffset;
        List<long[]> runs = split.size() == 1 ? List.<long[]>of(new long[] {first, first + local})
                : ContextParallelSplit.runs(Arrays.copyOfRange(split.positions(s), (int) start, (int) (start + local)));
        // slices of a parameter attach to the parameter's manager: they move to the frame
        NDArray rows = Tensors.own(ContextParallelSplit.slices(position.data(), 0, runs), scope.manager());
        return words.add(Tensors.own(rows.expandDims(1), scope.manager()));
    }
}
