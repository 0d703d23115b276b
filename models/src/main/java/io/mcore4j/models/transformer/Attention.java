package io.mcore4j.models.transformer;

import ai.djl.ndarray.NDArray;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.nn.UnaryModule;

/**
 * A layer's {@code self_attention} (Megatron-Core's {@code Attention} base class): the grouped-query
 * {@link SelfAttention} or {@link MultiLatentAttention}, in a training pass and during generation.
 */
public interface Attention extends UnaryModule {
    /**
     * Attention of a training pass whose tokens may sit at explicit positions and in packed sequences.
     *
     * @param scope the pass's scope
     * @param x normalised activations [s, b, h] (or [s/TP, b, h] with sequence parallelism)
     * @param positions the tokens' position ids and packed sequences ({@link TokenPositions#DEFAULT} for none)
     * @return the attention output, same shape as {@code x}
     * @throws IllegalArgumentException where the attention cannot honour {@code positions}
     */
    NDArray forward(AutogradScope scope, NDArray x, TokenPositions positions);

    /**
     * Attention during generation over the cached keys and values of earlier tokens and the pass's own.
     *
     * @param scope the pass's (no-grad) scope
     * @param x normalised activations [s, b, h]
     * @param positionOffset position of the pass's first token in its sequences
     * @param cache this layer's key/value cache
     * @return the attention output, same shape as {@code x}
     */
    NDArray forward(AutogradScope scope, NDArray x, long positionOffset, KeyValueCache cache);
}
