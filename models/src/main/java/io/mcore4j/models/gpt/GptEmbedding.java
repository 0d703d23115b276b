package io.mcore4j.models.gpt;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.contextparallel.ContextParallelSplit;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.nn.Module;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.transformer.Dropout;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.tensorparallel.VocabParallelEmbedding;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Word embeddings (vocab-parallel) plus learned absolute position embeddings, then dropout.
 * Output [s, b, h], or this rank's [s/TP, b, h] slice with sequence parallelism (the word
 * embedding reduce-scatters; the position embedding adds the matching rows). Under context
 * parallelism {@code s} is this rank's part of the sequence, and its learned position rows are
 * those of its tokens' global positions ({@link ContextParallelSplit#positions}).
 */
public final class GptEmbedding implements Module {
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
        this.word = VocabParallelEmbedding.builder(c.vocabSize(), c.hiddenSize(), ctx.groups().tp())
                .sequenceParallel(c.sequenceParallel())
                .initializer(ctx.initializer(WORD_KEY + "weight", c.initStd()))
                .dtype(c.dtype()).manager(ctx.parameters()).name(WORD_KEY).build();
        if (c.positionEmbedding() == TransformerConfig.PositionEmbedding.LEARNED_ABSOLUTE) {
            NDArray table = ctx.initializer(POSITION_KEY + "weight", c.initStd()).create(ctx.parameters(), new Shape(c.maxSequenceLength(), c.hiddenSize()), c.dtype());
            this.position = new Parameter("weight", table, Parameter.Partition.NONE,
                    c.sequenceParallel() ? Parameter.Kind.SEQUENCE_PARALLEL : Parameter.Kind.DENSE);
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
        NDArray x = word.forward(scope, tokens);
        if (position != null) {
            ContextParallelSplit split = ContextParallelSplit.of(ctx.groups().cp());
            long s = split.sequenceLength(tokens.getShape().get(0));
            if (positionOffset + s > position.data().getShape().get(0)) {
                throw new IllegalArgumentException("sequence length " + (positionOffset + s) + " exceeds the max sequence length "
                        + position.data().getShape().get(0));
            }
            long local = x.getShape().get(0);
            long start = ctx.config().sequenceParallel() ? local * ctx.groups().tensorParallelRank() : 0;
            // this rank's rows: one run without context parallelism (from the generation offset), up to two (its chunks) with it
            long first = start + positionOffset;
            List<long[]> runs = split.size() == 1 ? List.<long[]>of(new long[] {first, first + local})
                    : ContextParallelSplit.runs(Arrays.copyOfRange(split.positions(s), (int) start, (int) (start + local)));
            // slices of a parameter would attach to the parameter's manager: move them to the pass's scope
            NDArray rows = ContextParallelSplit.slices(position.data(), 0, runs);
            rows.attach(scope.manager());
            NDArray column = rows.expandDims(1);
            column.attach(scope.manager());
            NDArray words = x;
            x = words.add(column);
            // the sum saves nothing for backward: the word embeddings die here unless a Function refers to them
            scope.release(words, rows, column);
        }
        NDArray dropped = Dropout.apply(scope, x, ctx.config().hiddenDropout(), ctx.hiddenDropout());
        if (dropped != x) {
            scope.release(x);
        }
        return dropped;
    }

    @Override
    public List<Parameter> parameters() {
        List<Parameter> out = new ArrayList<>(word.parameters());
        if (position != null) {
            out.add(position);
        }
        return out;
    }

    @Override
    public Map<String, Parameter> namedParameters(String prefix) {
        Map<String, Parameter> out = new LinkedHashMap<>(word.namedParameters(prefix + WORD_KEY));
        if (position != null) {
            out.put(prefix + POSITION_KEY + position.name(), position);
        }
        return out;
    }

    @Override
    public List<ShardedTensor> shardedState(String prefix) {
        List<ShardedTensor> out = new ArrayList<>(word.shardedState(prefix + WORD_KEY));
        if (position != null) {
            out.add(position.sharded(prefix + POSITION_KEY, ctx.groups().tensorParallelRank()));
        }
        return out;
    }
}
