package io.mcore4j.server;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * One generating endpoint of OpenAI's API: how its request becomes a prompt and {@link GenerationParams}, and how
 * its answer is shaped, whole or as server-sent chunks. The handler drives both endpoints the same way; the
 * subclasses own only what differs ({@code prompt} or {@code messages}, {@code text} or {@code message}/{@code delta},
 * the log-probability formats).
 */
abstract class Endpoint {
    /**
     * A parsed request, ready to submit.
     *
     * @param prompt the prompt's ids
     * @param params how tokens are picked and where they stop
     * @param stream whether the answer is streamed
     * @param includeUsage whether a stream ends with a chunk of usage ({@code stream_options.include_usage})
     * @param echo text that precedes the completion in the answer ({@code echo}), empty for none
     */
    record Prepared(int[] prompt, GenerationParams params, boolean stream, boolean includeUsage, String echo) {}

    /** The log-probabilities of a choice's tokens, collected as they are sent. */
    static final class TokenLog {
        final List<String> tokens = new ArrayList<>();
        final List<Float> logprobs = new ArrayList<>();
        final List<Integer> offsets = new ArrayList<>();

        void add(ServingTokenizer tokenizer, GenerationRun.Piece piece, int textOffset) {
            for (int k = 0; k < piece.tokens().length; k++) {
                tokens.add(tokenizer.decode(new int[] {piece.tokens()[k]}));
                logprobs.add(piece.logprobs()[k]);
                offsets.add(textOffset);
            }
        }
    }

    /** @return the path, such as {@code /v1/completions} */
    abstract String path();

    /** @return the {@code object} of a whole answer */
    abstract String object();

    /** @return the {@code object} of a streamed chunk */
    abstract String chunkObject();

    /** @return the answer id's prefix */
    abstract String idPrefix();

    /** @return the fields besides {@link GenerationParams#FIELDS} this endpoint reads */
    abstract Set<String> ownFields();

    /**
     * Reads the endpoint's own fields and the shared ones.
     *
     * @param f the request
     * @param model the served model
     * @return the request, ready to submit
     * @throws OpenAiError 400 naming a bad field
     */
    abstract Prepared prepare(RequestFields f, ServedModel model);

    /**
     * A whole answer's choice.
     *
     * @param text the completion (with the echo)
     * @param log the tokens' log-probabilities, or null when not asked for
     * @param finishReason {@code stop} or {@code length}
     * @return the choice
     */
    abstract Map<String, Object> choice(String text, TokenLog log, String finishReason);

    /**
     * A streamed chunk's choice.
     *
     * @param text the new text (the echo, on the first chunk)
     * @param log the new tokens' log-probabilities, or null when not asked for
     * @param first whether this is the stream's first chunk
     * @param finishReason null, or the reason on the last chunk
     * @return the choice
     */
    abstract Map<String, Object> chunkChoice(String text, TokenLog log, boolean first, String finishReason);

    /**
     * @param p the request
     * @return whether a stream starts with a chunk before any token (the chat's role, a completion's echo)
     */
    abstract boolean opensStream(Prepared p);

    /** @return every field name the endpoint accepts */
    final Set<String> fields() {
        Set<String> all = new HashSet<>(GenerationParams.FIELDS);
        all.addAll(ownFields());
        return all;
    }

    /**
     * Checks {@code model}, {@code stream} and {@code stream_options}, and builds the prepared request.
     *
     * @param f the request
     * @param prompt the prompt's ids
     * @param params the parsed parameters
     * @param echo the echo text, or empty
     * @return the prepared request
     */
    static Prepared prepared(RequestFields f, int[] prompt, GenerationParams params, String echo) {
        boolean stream = f.bool("stream", false);
        boolean includeUsage = false;
        Object options = f.raw("stream_options");
        if (options != null) {
            if (!stream) {
                throw OpenAiError.badRequest("stream_options", "stream_options is only allowed when stream is true");
            }
            if (!(options instanceof Map<?, ?> map)) {
                throw RequestFields.wrongType("stream_options", options, "an object");
            }
            for (Map.Entry<?, ?> e : map.entrySet()) {
                if (e.getKey().equals("include_usage") && e.getValue() instanceof Boolean b) {
                    includeUsage = b;
                } else if (!e.getKey().equals("include_usage") || e.getValue() != null) {
                    throw OpenAiError.badRequest("stream_options", "stream_options." + e.getKey()
                            + (e.getKey().equals("include_usage") ? " must be a boolean" : " is not supported"));
                }
            }
        }
        return new Prepared(prompt, params, stream, includeUsage, echo);
    }

    /**
     * Refuses a request naming another model.
     *
     * @param f the request
     * @param model the served model
     * @throws OpenAiError 404 {@code model_not_found}
     */
    static void checkModel(RequestFields f, ServedModel model) {
        String name = f.string("model", model.name());
        if (!name.equals(model.name())) {
            throw new OpenAiError(404, "invalid_request_error", "model", "model_not_found", "the model `" + name
                    + "` does not exist; this server serves `" + model.name() + "`");
        }
    }

    /** Refuses a field given with anything but its neutral value. */
    static void refuse(RequestFields f, String name, Object neutral, String why) {
        Object v = f.raw(name);
        if (v != null && !v.equals(neutral) && !(v instanceof List<?> l && l.isEmpty())) {
            throw OpenAiError.badRequest(name, name + " " + why);
        }
    }

    /** OpenAI's envelope around a choice. */
    final Map<String, Object> envelope(String object, String id, long created, ServedModel model, List<Object> choices) {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("id", id);
        out.put("object", object);
        out.put("created", created);
        out.put("model", model.name());
        out.put("choices", choices);
        return out;
    }

    /** {@code usage} of a finished request. */
    static Map<String, Object> usage(GenerationRun run) {
        Map<String, Object> usage = new LinkedHashMap<>();
        usage.put("prompt_tokens", run.promptTokens());
        usage.put("completion_tokens", run.completionTokens());
        usage.put("total_tokens", run.promptTokens() + run.completionTokens());
        return usage;
    }

    /** A token's UTF-8 bytes as a list of ints, as OpenAI's chat log-probabilities give them. */
    static List<Integer> utf8(String token) {
        List<Integer> out = new ArrayList<>();
        for (byte b : token.getBytes(StandardCharsets.UTF_8)) {
            out.add(b & 0xff);
        }
        return out;
    }
}
