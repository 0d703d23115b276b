package io.mcore4j.server;

import io.mcore4j.data.chat.ChatTemplateException;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * {@code POST /v1/chat/completions}: the messages are rendered with the model's chat template and
 * {@code add_generation_prompt} (true unless the request says otherwise; vLLM's {@code chat_template_kwargs} are
 * more template variables), tokenized without added special tokens (the template writes them), and completed. A
 * message's {@code content} is a string or a list of text parts, joined with newlines. A missing
 * {@code max_completion_tokens} (or {@code max_tokens}) is the rest of the model's context. Tool calls and response
 * formats are refused, naming the field.
 */
final class ChatCompletionsEndpoint extends Endpoint {
    @Override
    String path() {
        return "/v1/chat/completions";
    }

    @Override
    String object() {
        return "chat.completion";
    }

    @Override
    String chunkObject() {
        return "chat.completion.chunk";
    }

    @Override
    String idPrefix() {
        return "chatcmpl-";
    }

    @Override
    Set<String> ownFields() {
        return Set.of("messages", "max_tokens", "max_completion_tokens", "logprobs", "top_logprobs",
                "chat_template_kwargs", "add_generation_prompt", "tools", "tool_choice", "parallel_tool_calls",
                "response_format");
    }

    @Override
    Prepared prepare(RequestFields f, ServedModel model) {
        checkModel(f, model);
        refuse(f, "tools", List.of(), "(tool calls) are not supported by this server");
        refuse(f, "tool_choice", "none", "is not supported by this server (tool calls are not)");
        if (f.raw("response_format") instanceof Map<?, ?> format && !"text".equals(format.get("type"))) {
            throw OpenAiError.badRequest("response_format", "response_format " + format.get("type")
                    + " is not supported by this server (only text)");
        }
        f.bool("parallel_tool_calls", true);
        boolean logprobs = f.bool("logprobs", false);
        long top = f.integer("top_logprobs", 0, 0, 20);
        if (f.has("top_logprobs") && !logprobs) {
            throw OpenAiError.badRequest("top_logprobs", "top_logprobs needs logprobs true");
        }
        if (top > 0) {
            throw OpenAiError.badRequest("top_logprobs", "top_logprobs " + top + ": this engine returns the picked"
                    + " token's log-probability only, not the most likely alternatives (top_logprobs must be 0)");
        }
        if (model.chatTemplate() == null) {
            throw OpenAiError.badRequest("messages", "the served model has no chat template; start the server with one"
                    + " (serve-gpt --chat-template FILE) or use /v1/completions");
        }
        List<Map<String, Object>> messages = messages(f.raw("messages"));
        Map<String, Object> variables = new LinkedHashMap<>();
        Object kwargs = f.raw("chat_template_kwargs");
        if (kwargs != null) {
            if (!(kwargs instanceof Map<?, ?> map)) {
                throw RequestFields.wrongType("chat_template_kwargs", kwargs, "an object");
            }
            map.forEach((k, v) -> variables.put((String) k, v));
        }
        String text;
        try {
            text = model.renderChat(messages, variables, f.bool("add_generation_prompt", true));
        } catch (ChatTemplateException e) {
            throw OpenAiError.badRequest("messages", "the chat template cannot render these messages: " + e.getMessage());
        }
        int[] prompt = model.tokenizer().encode(text, false);
        if (prompt.length == 0) {
            throw OpenAiError.badRequest("messages", "the rendered chat is empty: generation needs at least one token");
        }
        String budget = f.has("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
        GenerationParams params = GenerationParams.parse(f, "messages", budget, 0, prompt.length, model.engine().maxSequenceLength(),
                model.engine().vocabularySize(), logprobs);
        return prepared(f, prompt, params, "");
    }

    /** The messages as the template reads them: each a copy, its content a string. */
    private static List<Map<String, Object>> messages(Object value) {
        if (value == null) {
            throw OpenAiError.badRequest("messages", "messages is required: a non-empty list of messages");
        }
        if (!(value instanceof List<?> list) || list.isEmpty()) {
            throw RequestFields.wrongType("messages", value, "a non-empty list of messages");
        }
        List<Map<String, Object>> out = new ArrayList<>();
        for (int k = 0; k < list.size(); k++) {
            String at = "messages[" + k + "]";
            if (!(list.get(k) instanceof Map<?, ?> m)) {
                throw RequestFields.wrongType(at, list.get(k), "an object with a role and content");
            }
            Map<String, Object> message = new LinkedHashMap<>();
            m.forEach((key, v) -> message.put((String) key, v));
            if (!(message.get("role") instanceof String)) {
                throw RequestFields.wrongType(at + ".role", message.get("role"), "a string");
            }
            Object content = message.get("content");
            if (content instanceof List<?> parts) {
                message.put("content", joinTextParts(at, parts));
            } else if (content != null && !(content instanceof String)) {
                throw RequestFields.wrongType(at + ".content", content, "a string or a list of text parts");
            }
            out.add(message);
        }
        return out;
    }

    private static String joinTextParts(String at, List<?> parts) {
        List<String> texts = new ArrayList<>();
        for (Object part : parts) {
            if (!(part instanceof Map<?, ?> p) || !"text".equals(p.get("type")) || !(p.get("text") instanceof String t)) {
                throw OpenAiError.badRequest(at + ".content", at + ".content holds a part that is not"
                        + " {\"type\": \"text\", \"text\": ...}: this server reads text only");
            }
            texts.add(t);
        }
        return String.join("\n", texts);
    }

    @Override
    boolean opensStream(Prepared p) {
        return true;
    }

    @Override
    Map<String, Object> choice(String text, TokenLog log, String finishReason) {
        Map<String, Object> message = new LinkedHashMap<>();
        message.put("role", "assistant");
        message.put("content", text);
        return choiceOf("message", message, log, finishReason);
    }

    @Override
    Map<String, Object> chunkChoice(String text, TokenLog log, boolean first, String finishReason) {
        Map<String, Object> delta = new LinkedHashMap<>();
        if (first) {
            delta.put("role", "assistant");
        }
        if (first || !text.isEmpty()) {
            delta.put("content", text);
        }
        return choiceOf("delta", delta, log, finishReason);
    }

    private static Map<String, Object> choiceOf(String key, Map<String, Object> message, TokenLog log,
                                                String finishReason) {
        Map<String, Object> choice = new LinkedHashMap<>();
        choice.put("index", 0);
        choice.put(key, message);
        Map<String, Object> logprobs = null;
        if (log != null) {
            List<Object> content = new ArrayList<>();
            for (int k = 0; k < log.tokens.size(); k++) {
                Map<String, Object> entry = new LinkedHashMap<>();
                entry.put("token", log.tokens.get(k));
                entry.put("logprob", log.logprobs.get(k));
                entry.put("bytes", utf8(log.tokens.get(k)));
                entry.put("top_logprobs", List.of());
                content.add(entry);
            }
            logprobs = Map.of("content", content);
        }
        choice.put("logprobs", logprobs);
        choice.put("finish_reason", finishReason);
        return choice;
    }
}
