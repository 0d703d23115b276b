package io.mcore4j.models.transformer;

import ai.djl.ndarray.NDArray;
import io.mcore4j.core.autograd.AutogradScope;

/**
 * What a forward pass needs to continue sequences whose earlier tokens have already run (Megatron-Core's
 * {@code InferenceContext}): where the pass's tokens sit in their sequences, and per layer the
 * {@link KeyValueCache} that holds the earlier tokens' keys and values. Every sequence of the batch is at
 * the same position ({@link #sequenceLengthOffset()}); generators handle prompts of different lengths by
 * feeding each sequence its own prompt tokens until it has none left. mcore4j-inference implements it.
 *
 * <p>A pass with an inference context runs without autograd ({@code AutogradScope.openNoGrad}) and without
 * sequence parallelism.
 */
public interface InferenceContext {

    /**
     * Position of the pass's first token in every sequence (Megatron's {@code sequence_len_offset}): 0
     * for the first pass over a prompt, then the number of tokens already cached.
     *
     * @return the offset, non-negative
     */
    int sequenceLengthOffset();

    /**
     * The cache of one layer.
     *
     * @param layerNumber the layer's global index
     * @return its cache, never null
     */
    KeyValueCache keyValueCache(int layerNumber);

    /**
     * Runs one whole layer of the pass, when this context can do it in fewer native calls than the layer's
     * op-by-op path (a fused kernel over the layer's own parameters and its cache: generation is bound by the
     * host's per-op cost), with the same result up to floating-point rounding.
     *
     * @param scope the pass's (no-grad) scope; owns the result
     * @param layer the layer, whose parameters the kernel reads
     * @param hidden the layer's input [s, b, h]
     * @return the layer's output [s, b, h], or null to have the layer run op by op with
     *     {@link #keyValueCache(int)}; this default always returns null
     */
    default NDArray forwardLayer(AutogradScope scope, TransformerLayer layer, NDArray hidden) {
        return null;
    }
}
