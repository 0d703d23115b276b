package io.mcore4j.models.transformer;

import ai.djl.ndarray.NDArray;
import io.mcore4j.core.PackedSequences;
import io.mcore4j.core.autograd.AutogradScope;

/**
 * Causal attention over this rank's heads: queries [s, b, heads, d], keys and values
 * [s, b, groups, d] (GQA: each group serves heads / groups query heads) → context [s, b, heads * d].
 */
public interface CoreAttention {

    /**
     * @param scope the pass's scope
     * @param query [s, b, np, d]
     * @param key [s, b, ng, d]
     * @param value [s, b, ng, d]
     * @return context [s, b, np * d]
     */
    NDArray forward(AutogradScope scope, NDArray query, NDArray key, NDArray value);

    /**
     * Attention of packed sequences: a query attends only the keys of its own sequence, up to itself.
     *
     * @param scope the pass's scope
     * @param query [s, b, np, d]
     * @param key [s, b, ng, d]
     * @param value [s, b, ng, d]
     * @param packed the micro-batch's sequences (under context parallelism the whole micro-batch's,
     *     {@link TokenPositions}), or null for one causal sequence per column
     * @return context [s, b, np * d]
     * @throws UnsupportedOperationException if {@code packed} is given to an attention that has no
     *     packed path (this default)
     */
    default NDArray forward(AutogradScope scope, NDArray query, NDArray key, NDArray value, PackedSequences packed) {
        if (packed != null) {
            throw new UnsupportedOperationException(getClass().getSimpleName() + " does not attend packed sequences");
        }
        return forward(scope, query, key, value);
    }

    /** Builds a core attention for a model context. */
    @FunctionalInterface
    interface Factory {
        /**
         * @param ctx the model context
         * @return the attention
         */
        CoreAttention create(ModelContext ctx);
    }
}
