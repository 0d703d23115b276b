package io.mcore4j.inference;

/**
 * How one request picks its next tokens (Megatron-Core's {@code SamplingParams}). Greedy decoding is
 * {@code topK = 1} (or temperature 0); otherwise the logits are divided by the temperature, cut to the
 * {@code topK} most likely tokens (0: no cut), then to the smallest set whose probability reaches
 * {@code topP} (0: no cut), and a token is drawn from the renormalised rest with the request's own
 * generator, seeded with {@code seed}: the same request draws the same tokens alone or in any batch, at
 * any parallel layout.
 *
 * @param temperature divisor of the logits; 0 means greedy
 * @param topK keep this many most likely tokens; 0 keeps all, 1 is greedy
 * @param topP nucleus threshold in [0, 1]; 0 keeps all
 * @param numTokensToGenerate the most new tokens to produce
 * @param seed seed of the request's generator (unused when greedy)
 */
public record SamplingParams(double temperature, int topK, double topP, int numTokensToGenerate, long seed) {

    /** Validates the values, naming the bad one. */
    public SamplingParams {
        if (!(temperature >= 0) || Double.isInfinite(temperature)) {
            throw new IllegalArgumentException("temperature " + temperature + " must be finite and >= 0 (0 = greedy)");
        }
        if (topK < 0) {
            throw new IllegalArgumentException("top-k " + topK + " must be >= 0 (0 = no cut, 1 = greedy)");
        }
        if (!(topP >= 0 && topP <= 1)) {
            throw new IllegalArgumentException("top-p " + topP + " must be in [0, 1] (0 = no cut)");
        }
        if (numTokensToGenerate < 1) {
            throw new IllegalArgumentException("tokens to generate must be at least 1, got " + numTokensToGenerate);
        }
    }

    /**
     * Greedy decoding: always the most likely token (the lowest id among equals).
     *
     * @param numTokensToGenerate the most new tokens
     * @return the parameters
     */
    public static SamplingParams greedy(int numTokensToGenerate) {
        return new SamplingParams(1.0, 1, 0.0, numTokensToGenerate, 0);
    }

    /**
     * Sampling.
     *
     * @param temperature divisor of the logits (&gt; 0)
     * @param topK keep this many most likely tokens (0 = all)
     * @param topP nucleus threshold (0 = no cut)
     * @param numTokensToGenerate the most new tokens
     * @param seed the request's seed
     * @return the parameters
     */
    public static SamplingParams sample(double temperature, int topK, double topP, int numTokensToGenerate, long seed) {
        return new SamplingParams(temperature, topK, topP, numTokensToGenerate, seed);
    }

    /** @return whether the next token is always the most likely one */
    public boolean isGreedy() {
        return topK == 1 || temperature == 0;
    }

    /**
     * The same parameters with another seed.
     *
     * @param newSeed the seed
     * @return a new value
     */
    public SamplingParams withSeed(long newSeed) {
        return new SamplingParams(temperature, topK, topP, numTokensToGenerate, newSeed);
    }
}
