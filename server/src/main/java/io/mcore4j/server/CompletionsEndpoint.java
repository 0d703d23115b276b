package io.mcore4j.server;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * {@code POST /v1/completions}: a prompt given as text or token ids (one per request), completed; {@code echo} puts
 * the prompt's text before the completion; {@code logprobs} 0 returns each token's log-probability in the legacy
 * format ({@code tokens}, {@code token_logprobs}, {@code top_logprobs}, {@code text_offset}). A missing
 * {@code max_tokens} is 16, as OpenAI's.
 */
final class CompletionsEndpoint extends Endpoint {
    /** OpenAI's default {@code max_tokens} for completions. */
    static final int DEFAULT_MAX_TOKENS = 16;

    @Override
    String path() {
        return "/v1/completions";
    }

    @Override
    String object() {
        return "text_completion";
    }

    @Override
    String chunkObject() {
        return "text_completion";
    }

    @Override
    String idPrefix() {
        return "cmpl-";
    }

    @Override
    Set<String> ownFields() {
        return Set.of("prompt", "max_tokens", "logprobs", "echo", "suffix", "best_of");
    }

    @Override
    Prepared prepare(RequestFields f, ServedModel model) {
        checkModel(f, model);
        refuse(f, "suffix", "", "is not supported by this server");
        long bestOf = f.integer("best_of", 1, 1, 128);
        if (bestOf != 1) {
            throw OpenAiError.badRequest("best_of", "best_of " + bestOf + ": this server returns one choice per request"
                    + " (best_of must be 1)");
        }
        boolean logprobs = f.has("logprobs");
        long top = f.integer("logprobs", 0, 0, 20);
        if (top > 0) {
            throw OpenAiError.badRequest("logprobs", "logprobs " + top + ": this engine returns the picked token's"
                    + " log-probability only, not the most likely alternatives (logprobs must be 0)");
        }
        boolean echo = f.bool("echo", false);
        if (echo && logprobs) {
            throw OpenAiError.badRequest("echo", "echo with logprobs needs the prompt's log-probabilities, which this"
                    + " engine does not compute");
        }
        int[] prompt;
        String text;
        Object p = f.raw("prompt");
        if (p instanceof List<?> list && list.size() == 1 && (list.get(0) instanceof String || list.get(0) instanceof List<?>)) {
            p = list.get(0); // a batch of one
        }
        if (p instanceof String s) {
            prompt = model.tokenizer().encode(s, true);
            text = s;
        } else if (p instanceof List<?> list && !list.isEmpty() && !(list.get(0) instanceof String) && !(list.get(0) instanceof List<?>)) {
            prompt = new int[list.size()];
            for (int k = 0; k < prompt.length; k++) {
                prompt[k] = (int) RequestFields.integerValue("prompt", list.get(k), 0, model.engine().vocabularySize() - 1);
            }
            text = echo ? model.tokenizer().decode(prompt) : "";
        } else if (p instanceof List<?> list && list.size() > 1) {
            throw OpenAiError.badRequest("prompt", "this server completes one prompt per request, got " + list.size());
        } else if (p == null) {
            throw OpenAiError.badRequest("prompt", "prompt is required: a string or a list of token ids");
        } else {
            throw RequestFields.wrongType("prompt", p, "a string or a non-empty list of token ids");
        }
        if (prompt.length == 0) {
            throw OpenAiError.badRequest("prompt", "the prompt is empty: generation needs at least one token");
        }
        GenerationParams params = GenerationParams.parse(f, "prompt", "max_tokens", DEFAULT_MAX_TOKENS, prompt.length,
                model.engine().maxSequenceLength(), model.engine().vocabularySize(), logprobs);
        return prepared(f, prompt, params, echo ? text : "");
    }

    @Override
    boolean opensStream(Prepared p) {
        return !p.echo().isEmpty();
    }

    @Override
    Map<String, Object> choice(String text, TokenLog log, String finishReason) {
        return choiceOf(text, log, finishReason);
    }

    @Override
    Map<String, Object> chunkChoice(String text, TokenLog log, boolean first, String finishReason) {
        return choiceOf(text, log, finishReason);
    }

    private static Map<String, Object> choiceOf(String text, TokenLog log, String finishReason) {
        Map<String, Object> choice = new LinkedHashMap<>();
        choice.put("index", 0);
        choice.put("text", text);
        Map<String, Object> logprobs = null;
        if (log != null) {
            logprobs = new LinkedHashMap<>();
            logprobs.put("tokens", log.tokens);
            logprobs.put("token_logprobs", log.logprobs);
            logprobs.put("top_logprobs", null);
            logprobs.put("text_offset", log.offsets);
        }
        choice.put("logprobs", logprobs);
        choice.put("finish_reason", finishReason);
        return choice;
    }
}
