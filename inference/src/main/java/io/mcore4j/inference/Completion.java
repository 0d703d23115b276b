package io.mcore4j.inference;

/**
 * What one request produced.
 *
 * @param tokens the generated token ids, after the prompt; the termination token is not included
 * @param finishReason why generation stopped
 */
public record Completion(int[] tokens, FinishReason finishReason) {

    /** Why a request stopped. */
    public enum FinishReason {
        /** The request produced the termination (end-of-sequence) token. */
        TERMINATION_TOKEN,
        /** The request produced its {@code numTokensToGenerate} tokens. */
        LENGTH
    }

    /** Copies the token array, which the record then owns. */
    public Completion {
        tokens = tokens.clone();
    }

    @Override
    public int[] tokens() {
        return tokens.clone();
    }
}
