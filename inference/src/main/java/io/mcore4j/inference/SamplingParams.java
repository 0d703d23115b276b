package io.mcore4j.inference;

/**
 * How one request picks its next tokens (Megatron-Core's {@code SamplingParams}, with vLLM's and OpenAI's
 * penalties). Greedy decoding is {@code topK = 1} (or temperature 0); otherwise the logits are divided by the
 * temperature, cut to the {@code topK} most likely tokens (0: no cut), to those at least {@code minP} times as
 * likely as the most likely one (0: no cut), then to the smallest set whose probability reaches {@code topP} (0:
 * no cut), and a token is drawn from the renormalised rest with the request's own generator, seeded with
 * {@code seed}: the same request draws the same tokens alone or in any batch, at any parallel layout.
 *
 * <p>Penalties change the logits before all of that, greedy included, as vLLM does: a token of the prompt or of
 * the output so far has its logit divided by {@code repetitionPenalty} if positive, multiplied by it otherwise
 * (1: none); a token the output holds {@code n > 0} times loses {@code presencePenalty + n * frequencyPenalty}
 * (OpenAI's definitions; 0: none).
 *
 * @param temperature divisor of the logits; 0 means greedy
 * @param topK keep this many most likely tokens; 0 keeps all, 1 is greedy
 * @param topP nucleus threshold in [0, 1]; 0 keeps all
 * @param numTokensToGenerate the most new tokens to produce
 * @param seed seed of the request's generator (unused when greedy)
 * @param minP keep tokens at least this fraction of the most likely one's probability, in [0, 1]; 0 keeps all
 * @param repetitionPenalty &gt; 0; 1 is none
 * @param presencePenalty in [-2, 2]; 0 is none
 * @param frequencyPenalty in [-2, 2]; 0 is none
 */
public record SamplingParams(double temperature, int topK, double topP, int numTokensToGenerate, long seed, double minP,
                             double repetitionPenalty, double presencePenalty, double frequencyPenalty) {

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
        if (!(minP >= 0 && minP <= 1)) {
            throw new IllegalArgumentException("min-p " + minP + " must be in [0, 1] (0 = no cut)");
        }
        if (!(repetitionPenalty > 0) || Double.isInfinite(repetitionPenalty)) {
            throw new IllegalArgumentException("repetition penalty " + repetitionPenalty + " must be finite and > 0 (1 = none)");
        }
        if (!(presencePenalty >= -2 && presencePenalty <= 2)) {
            throw new IllegalArgumentException("presence penalty " + presencePenalty + " must be in [-2, 2] (0 = none)");
        }
        if (!(frequencyPenalty >= -2 && frequencyPenalty <= 2)) {
            throw new IllegalArgumentException("frequency penalty " + frequencyPenalty + " must be in [-2, 2] (0 = none)");
        }
    }

    /**
     * Parameters without min-p or penalties.
     *
     * @param temperature divisor of the logits; 0 means greedy
     * @param topK keep this many most likely tokens; 0 keeps all, 1 is greedy
     * @param topP nucleus threshold in [0, 1]; 0 keeps all
     * @param numTokensToGenerate the most new tokens to produce
     * @param seed seed of the request's generator
     */
    public SamplingParams(double temperature, int topK, double topP, int numTokensToGenerate, long seed) {
        this(temperature, topK, topP, numTokensToGenerate, seed, 0, 1, 0, 0);
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

    /** @return whether the next token is always the most likely one (after penalties) */
    public boolean isGreedy() {
        return topK == 1 || temperature == 0;
    }

    /** @return whether any penalty changes the logits */
    public boolean hasPenalties() {
        return repetitionPenalty != 1 || presencePenalty != 0 || frequencyPenalty != 0;
    }

    /** @return whether the next token is the model's most likely one as it stands: greedy, no penalty (picked on the device) */
    public boolean isPlainGreedy() {
        return isGreedy() && !hasPenalties();
    }

    /**
     * The same parameters with another seed.
     *
     * @param newSeed the seed
     * @return a new value
     */
    public SamplingParams withSeed(long newSeed) {
        return new SamplingParams(temperature, topK, topP, numTokensToGenerate, newSeed, minP, repetitionPenalty,
                presencePenalty, frequencyPenalty);
    }

    /**
     * The same parameters with another min-p.
     *
     * @param newMinP in [0, 1]
     * @return a new value
     */
    public SamplingParams withMinP(double newMinP) {
        return new SamplingParams(temperature, topK, topP, numTokensToGenerate, seed, newMinP, repetitionPenalty,
                presencePenalty, frequencyPenalty);
    }

    /**
     * The same parameters with other penalties.
     *
     * @param repetition &gt; 0 (1 = none)
     * @param presence in [-2, 2] (0 = none)
     * @param frequency in [-2, 2] (0 = none)
     * @return a new value
     */
    public SamplingParams withPenalties(double repetition, double presence, double frequency) {
        return new SamplingParams(temperature, topK, topP, numTokensToGenerate, seed, minP, repetition, presence,
                frequency);
    }
}
