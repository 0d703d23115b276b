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

    @Override
    public int[] promptTokens() {
        return promptTokens.clone();
    }

    @Override
    public int[] stopTokenIds() {
        return stopTokenIds.clone();
    }
}
