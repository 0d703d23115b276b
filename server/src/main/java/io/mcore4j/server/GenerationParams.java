package io.mcore4j.server;

import io.mcore4j.inference.SamplingParams;
import io.mcore4j.inference.engine.EngineRequest;

import java.util.List;
import java.util.Set;
import java.util.concurrent.ThreadLocalRandom;

/**
 * How one request's tokens are picked and where they stop, read from the fields both endpoints share with OpenAI's
 * names and ranges (and vLLM's extensions {@code top_k}, {@code min_p}, {@code repetition_penalty},
 * {@code stop_token_ids}). Validated when parsed; {@link #toEngineRequest} is the one place these values become an
 * {@link EngineRequest}.
 *
 * @param maxTokens the most new tokens (at least 1; the prompt and these fit the model's context)
 * @param temperature logits divisor; 0 is greedy
 * @param topP nucleus threshold in (0, 1]; 1 keeps every token
 * @param topK keep this many most likely tokens; 0 keeps all (the request's -1 reads as 0)
 * @param minP drop tokens less likely than this fraction of the most likely one's probability; 0 keeps all
 * @param presencePenalty subtracted from the logit of every token already generated, in [-2, 2]
 * @param frequencyPenalty subtracted once per earlier occurrence, in [-2, 2]
 * @param repetitionPenalty divides positive (multiplies negative) logits of tokens seen before; 1 is none
 * @param seed the request's generator seed (drawn at random when the request gives none)
 * @param stop texts that end the completion, not included in it
 * @param stopTokenIds ids that end the completion besides the model's end of sequence, not included
 * @param logprobs whether each token's log-probability is returned
 */
record GenerationParams(int maxTokens, double temperature, double topP, int topK, double minP, double presencePenalty,
                        double frequencyPenalty, double repetitionPenalty, long seed, List<String> stop,
                        int[] stopTokenIds, boolean logprobs) {

    /** The fields {@link #parse} reads besides the endpoint's own. */
    static final Set<String> FIELDS = Set.of("model", "temperature", "top_p", "top_k", "min_p", "presence_penalty",
            "frequency_penalty", "repetition_penalty", "stop", "stop_token_ids", "seed", "n", "stream", "stream_options",
            "user", "logit_bias");

    GenerationParams {
        stop = List.copyOf(stop);
        stopTokenIds = stopTokenIds.clone();
    }

    /**
     * Reads the shared fields.
     *
     * @param f the request
     * @param promptField the endpoint's prompt ({@code prompt}, {@code messages}), named when it leaves no room
     * @param maxTokensField the endpoint's name for the token budget ({@code max_tokens}, {@code max_completion_tokens})
     * @param defaultMaxTokens the budget when the request gives none, or 0 for the rest of the model's context
     * @param promptTokens the prompt's length
     * @param maxSequenceLength the model's context
     * @param vocabularySize ids a stop token may take
     * @param logprobs whether the endpoint's own field asked for log-probabilities
     * @return the parameters
     * @throws OpenAiError 400 naming the field whose value is wrong or that this server does not support
     */
    static GenerationParams parse(RequestFields f, String promptField, String maxTokensField, int defaultMaxTokens, int promptTokens,
                                  int maxSequenceLength, int vocabularySize, boolean logprobs) {
        long n = f.integer("n", 1, 1, 128);
        if (n != 1) {
            throw OpenAiError.badRequest("n", "n " + n + ": this server returns one choice per request (n must be 1)");
        }
        if (f.raw("logit_bias") instanceof java.util.Map<?, ?> bias && !bias.isEmpty()) {
            throw OpenAiError.badRequest("logit_bias", "logit_bias is not supported by this server");
        }
        f.string("user", null);
        int room = maxSequenceLength - promptTokens;
        if (room < 1) {
            throw OpenAiError.badRequest(promptField, "the prompt has " + promptTokens + " tokens; the model's context of "
                    + maxSequenceLength + " tokens leaves no room for a completion");
        }
        long maxTokens = f.integer(maxTokensField, defaultMaxTokens > 0 ? Math.min(defaultMaxTokens, room) : room, 1,
                Integer.MAX_VALUE);
        if (maxTokens > room) {
            throw OpenAiError.badRequest(maxTokensField, "this model's maximum context length is " + maxSequenceLength
                    + " tokens; the prompt has " + promptTokens + " and " + maxTokensField + " " + maxTokens
                    + " asks for more than the " + room + " left");
        }
        double temperature = f.number("temperature", 1.0, 0, Double.MAX_VALUE);
        double topP = f.number("top_p", 1.0, Double.MIN_VALUE, 1);
        long topK = f.integer("top_k", 0, -1, Integer.MAX_VALUE);
        double minP = f.number("min_p", 0, 0, 1);
        double presence = f.number("presence_penalty", 0, -2, 2);
        double frequency = f.number("frequency_penalty", 0, -2, 2);
        double repetition = f.number("repetition_penalty", 1, Double.MIN_VALUE, Double.MAX_VALUE);
        long seed = f.has("seed") ? f.integer("seed", 0, Long.MIN_VALUE, Long.MAX_VALUE)
                : ThreadLocalRandom.current().nextLong();
        List<String> stop = f.strings("stop");
        for (String s : stop) {
            if (s.isEmpty()) {
                throw OpenAiError.badRequest("stop", "stop strings must not be empty");
            }
        }
        int[] stopIds = f.integers("stop_token_ids", 0, vocabularySize - 1);
        return new GenerationParams((int) maxTokens, temperature, topP, (int) Math.max(topK, 0), minP, presence, frequency,
                repetition, seed, stop, stopIds, logprobs);
    }

    /**
     * The engine's request for a prompt. Parameters the engine's {@link SamplingParams} cannot carry are refused here,
     * naming them, rather than dropped.
     *
     * @param prompt the prompt's token ids
     * @return the request
     * @throws OpenAiError 400 naming a parameter the engine does not support
     */
    EngineRequest toEngineRequest(int[] prompt) {
        SamplingParams sampling = (temperature == 0 ? new SamplingParams(0, 1, 0, maxTokens, seed)
                : SamplingParams.sample(temperature, topK, topP >= 1 ? 0 : topP, maxTokens, seed).withMinP(minP))
                .withPenalties(repetitionPenalty, presencePenalty, frequencyPenalty);
        return new EngineRequest(prompt, sampling, stopTokenIds, logprobs);
    }

    @Override
    public int[] stopTokenIds() {
        return stopTokenIds.clone();
    }
}
