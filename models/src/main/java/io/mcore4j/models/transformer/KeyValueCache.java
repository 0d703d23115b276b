package io.mcore4j.models.transformer;

import ai.djl.ndarray.NDArray;
import io.mcore4j.core.autograd.AutogradScope;

/**
 * One layer's keys and values of the tokens already run, on this rank's query groups, and the
 * attention of new queries over them: it takes the place of the layer's core attention during
 * generation. Implemented in mcore4j-inference.
 */
public interface KeyValueCache {

    /**
     * Appends this pass's keys and values at the context's offset and returns the causal attention of
     * the pass's queries over every cached position up to their own.
     *
     * @param scope the pass's (no-grad) scope; owns the result
     * @param query rotated queries [s, b, np, d]
     * @param key rotated keys [s, b, ng, d]
     * @param value values [s, b, ng, d]
     * @return context [s, b, np * d]
     * @throws IllegalArgumentException if the pass runs past the cache's length or batch
     */
    NDArray attend(AutogradScope scope, NDArray query, NDArray key, NDArray value);
}
