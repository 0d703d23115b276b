package io.mcore4j.data.chat;

import io.mcore4j.data.preprocess.StrictJson;

import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * One line of supervised fine-tuning data, in the formats of Hugging Face TRL: a chat
 * ({@code {"messages": [{"role": ..., "content": ...}, ...], "tools": [...]}}), or a prompt and its completion,
 * either as texts ({@code {"prompt": "...", "completion": "..."}}) or as messages
 * ({@code {"prompt": [messages], "completion": [messages]}}). An optional {@code chat_template_kwargs} object holds
 * more template variables ({@code enable_thinking}, {@code date_string}); other keys are ignored.
 */
public sealed interface SftExample permits SftExample.Conversation, SftExample.PromptCompletion {

    /**
     * A chat, rendered by the chat template; the loss is on the assistant turns from {@code firstTrained} on.
     *
     * @param messages the messages, each with a string {@code role}
     * @param tools the tools' JSON schemas, or null
     * @param templateVariables more template variables, never null
     * @param firstTrained the first message whose assistant turns are trained (0 for a chat; the prompt's
     *     length for a prompt and completion given as messages)
     */
    record Conversation(List<Map<String, Object>> messages, List<Object> tools, Map<String, Object> templateVariables,
                        int firstTrained) implements SftExample {}

    /**
     * A text and its continuation, tokenized as one text with the tokenizer's special tokens and the end-of-sequence
     * token after the completion; the loss is on the completion and that token.
     *
     * @param prompt the prompt
     * @param completion the completion
     */
    record PromptCompletion(String prompt, String completion) implements SftExample {}

    /**
     * Reads one JSON Lines record.
     *
     * @param json the line
     * @return the example
     * @throws io.mcore4j.data.preprocess.JsonSyntaxException if the line is not JSON
     * @throws IllegalArgumentException if it is JSON but not an example, saying why
     */
    static SftExample parse(String json) {
        if (!(StrictJson.parseKeepingIntegers(json) instanceof Map<?, ?> top)) {
            throw new IllegalArgumentException("expected a JSON object with \"messages\" or \"prompt\" and \"completion\"");
        }
        checkNoMarkers(top);
        Map<String, Object> variables = new LinkedHashMap<>();
        if (top.containsKey("chat_template_kwargs")) {
            if (!(top.get("chat_template_kwargs") instanceof Map<?, ?> kwargs)) {
                throw new IllegalArgumentException("\"chat_template_kwargs\" is not an object");
            }
            kwargs.forEach((k, v) -> variables.put((String) k, v));
        }
        List<Object> tools = null;
        if (top.get("tools") != null) {
            if (!(top.get("tools") instanceof List<?> list)) {
                throw new IllegalArgumentException("\"tools\" is not a list");
            }
            tools = new ArrayList<>(list);
        }
        if (top.containsKey("messages")) {
            List<Map<String, Object>> messages = messages(top.get("messages"), "messages");
            requireAssistant(messages, 0);
            return new Conversation(messages, tools, variables, 0);
        }
        Object prompt = top.get("prompt");
        Object completion = top.get("completion");
        if (prompt instanceof String p && completion instanceof String c) {
            return new PromptCompletion(p, c);
        }
        if (prompt instanceof List<?> && completion instanceof List<?>) {
            List<Map<String, Object>> messages = new ArrayList<>(messages(prompt, "prompt"));
            int first = messages.size();
            messages.addAll(messages(completion, "completion"));
            requireAssistant(messages, first);
            return new Conversation(messages, tools, variables, first);
        }
        if (prompt != null || completion != null) {
            throw new IllegalArgumentException("\"prompt\" and \"completion\" must both be strings or both lists of messages");
        }
        throw new IllegalArgumentException("expected \"messages\" (a chat) or \"prompt\" and \"completion\"; found the keys "
                + top.keySet());
    }

    @SuppressWarnings("unchecked")
    private static List<Map<String, Object>> messages(Object value, String key) {
        if (!(value instanceof List<?> list) || list.isEmpty()) {
            throw new IllegalArgumentException("\"" + key + "\" is not a non-empty list of messages");
        }
        for (int k = 0; k < list.size(); k++) {
            if (!(list.get(k) instanceof Map<?, ?> message)) {
                throw new IllegalArgumentException(key + "[" + k + "] is not an object");
            }
            if (!(message.get("role") instanceof String)) {
                throw new IllegalArgumentException(key + "[" + k + "] has no \"role\" string");
            }
        }
        return Collections.unmodifiableList((List<Map<String, Object>>) list);
    }

    private static void requireAssistant(List<Map<String, Object>> messages, int from) {
        for (int k = from; k < messages.size(); k++) {
            if ("assistant".equals(messages.get(k).get("role"))) {
                return;
            }
        }
        throw new IllegalArgumentException("no message with role \"assistant\"" + (from > 0 ? " in \"completion\"" : "")
                + ": nothing to train on");
    }

    /** The marker characters of {@link RenderedChat} may not appear in the data. */
    private static void checkNoMarkers(Object value) {
        if (value instanceof String s) {
            s.chars().filter(RenderedChat::isMarker).findFirst().ifPresent(c -> {
                throw new IllegalArgumentException(String.format("a text holds U+%04X, a Unicode noncharacter that mcore4j"
                        + " reserves to find each message in a rendered chat", c));
            });
        } else if (value instanceof Map<?, ?> map) {
            map.forEach((k, v) -> {
                checkNoMarkers(k);
                checkNoMarkers(v);
            });
        } else if (value instanceof List<?> list) {
            list.forEach(SftExample::checkNoMarkers);
        }
    }
}
