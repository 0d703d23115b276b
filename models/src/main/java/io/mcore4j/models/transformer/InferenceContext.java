package io.mcore4j.models.transformer;

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
}
