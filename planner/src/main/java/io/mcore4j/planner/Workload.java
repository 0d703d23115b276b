package io.mcore4j.planner;

import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.transformer.AttentionBackend;
import io.mcore4j.optimizer.OptimizerConfig;
import io.mcore4j.tensorparallel.Vocab;

import java.util.Objects;

/**
 * What is to be trained, independent of how it is laid out: the model, the batch, the sequence, the
 * optimizer settings and the attention kind, the same values {@code pretrain-gpt} maps its flags onto.
 *
 * @param model the model; its {@code vocabSize} is the tokenizer's vocabulary, padded per layout to a
 *     multiple of {@code vocabDivisor x TP} as {@code pretrain-gpt} does; its recompute and sequence
 *     parallelism are replaced by each layout's
 * @param seqLength tokens per sample
 * @param globalBatchSize samples per iteration
 * @param vocabDivisor Megatron's {@code --make-vocab-size-divisible-by}
 * @param optimizer optimizer and gradient-reduction settings (the distributed optimizer and the sharding strategy
 *     are decided per layout)
 * @param attention the core attention kind
 */
public record Workload(TransformerConfig model, int seqLength, long globalBatchSize, int vocabDivisor,
                       OptimizerConfig optimizer, AttentionBackend attention) {

    /**
     * Checks the values.
     *
     * @throws IllegalArgumentException naming the value that is wrong
     */
    public Workload {
        Objects.requireNonNull(model, "model");
        Objects.requireNonNull(optimizer, "optimizer");
        Objects.requireNonNull(attention, "attention");
        if (seqLength < 1 || seqLength > model.maxSequenceLength()) {
            throw new IllegalArgumentException("sequence length " + seqLength + " must be in [1, "
                    + model.maxSequenceLength() + " max position embeddings]");
        }
        if (globalBatchSize < 1) {
            throw new IllegalArgumentException("global batch size " + globalBatchSize + " must be at least 1");
        }
        if (vocabDivisor < 1) {
            throw new IllegalArgumentException("vocab divisor " + vocabDivisor + " must be at least 1");
        }
        if (optimizer.precision().paramDtype() != model.dtype()) {
            throw new IllegalArgumentException("the optimizer's precision " + optimizer.precision()
                    + " does not match the model's dtype " + model.dtype());
        }
    }

    /**
     * The model as a layout builds it: vocabulary padded for its TP size, its recompute policy (a
     * selective layout keeps the model's recompute modules where the model is selective already, else
     * recomputes the core attention).
     *
     * @param layout the layout
     * @return the config
     */
    public TransformerConfig modelFor(Layout layout) {
        boolean sequenceParallel = model.sequenceParallel() && layout.tensorParallel() > 1;
        TransformerConfig.Builder b = model.toBuilder().sequenceParallel(sequenceParallel)
                .tpCommOverlap(model.tpCommOverlap() && sequenceParallel);
        if (layout.recompute() == TransformerConfig.Recompute.FULL) {
            b.recomputeFull(layout.recomputeMethod(), layout.recomputeNumLayers());
        } else if (layout.recompute() != model.recompute()) {
            b.recompute(layout.recompute());
        }
        TransformerConfig c = b.build();
        return withVocab(c, Vocab.padded(model.vocabSize(), vocabDivisor, layout.tensorParallel()));
    }

    /**
     * The same model with another vocabulary size.
     *
     * @param c a model
     * @param vocab the vocabulary size
     * @return the model with {@code vocab} entries
     */
    public static TransformerConfig withVocab(TransformerConfig c, int vocab) {
        return c.withVocabSize(vocab);
    }

    /** @return the optimizer settings of a layout (its distributed optimizer and sharding strategy) */
    OptimizerConfig optimizerFor(Layout layout) {
        return optimizer.toBuilder().useDistributedOptimizer(layout.distributedOptimizer())
                .dataParallelShardingStrategy(layout.sharding()).build();
    }
}
