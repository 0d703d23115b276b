package io.mcore4j.inference.engine;

import io.mcore4j.inference.SamplingParams;

/**
 * One request to a {@link GenerationEngine}.
 *
 * @param promptTokens the prompt's token ids (at least one)
 * @param sampling how tokens are picked; its {@code numTokensToGenerate} is the request's {@code max_tokens}
 * @param stopTokenIds ids that end the request with {@link GenerationEngine.FinishReason#STOP} besides the engine's
 *     termination id (empty for none); the stopping token is not streamed
 * @param logprobs whether {@link GenerationEngine.TokenStream#onToken} carries each token's log-probability
 */
public record EngineRequest(int[] promptTokens, SamplingParams sampling, int[] stopTokenIds, boolean logprobs) {

    /** Validates and copies the arrays. */
    public EngineRequest {
        if (promptTokens == null || promptTokens.length == 0) {
            throw new IllegalArgumentException("a request needs at least one prompt token");
        }
        if (sampling == null) {
            throw new IllegalArgumentException("a request needs sampling parameters");
        }
        promptTokens = promptTokens.clone();
        stopTokenIds = stopTokenIds == null ? new int[0] : stopTokenIds.clone();
    }

    /** @return how many new tokens the request may produce */
    public int maxTokens() {
        return sampling.numTokensToGenerate();
    }

    /**
     * Checks that the request can ever run on an engine of these limits: what {@link GenerationEngine#submit}
     * refuses before it queues the request.
     *
     * @param vocabularySize ids a prompt token may take
     * @param maxModelLength the longest prompt plus new tokens one request may have
     * @throws IllegalArgumentException naming the prompt token outside the vocabulary and its position, or the
     *     positions the prompt and {@link #maxTokens()} need beyond the max model length
     */
    public void validate(int vocabularySize, int maxModelLength) {
        for (int k = 0; k < promptTokens.length; k++) {
            if (promptTokens[k] < 0 || promptTokens[k] >= vocabularySize) {
                throw new IllegalArgumentException("prompt token " + promptTokens[k] + " at position " + k
                        + " lies outside the vocabulary [0, " + vocabularySize + ")");
            }
        }
        int total = promptTokens.length + maxTokens();
        if (total > maxModelLength) {
            throw new IllegalArgumentException("a prompt of " + promptTokens.length + " tokens and max tokens "
                    + maxTokens() + " need " + total + " positions, more than the max model length " + maxModelLength);
        }
    }

    @Override
    public int[] promptTokens() {
        return promptTokens.clone();
    }

    @Override
    public int[] stopTokenIds() {
        return stopTokenIds.clone();
    }
}
