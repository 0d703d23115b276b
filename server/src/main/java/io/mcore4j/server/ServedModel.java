package io.mcore4j.server;

import io.mcore4j.data.chat.ChatTemplate;
import io.mcore4j.inference.engine.GenerationEngine;

import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * The model a server serves: its engine, the tokenizer of its vocabulary and its chat template, under the name
 * clients give as {@code model}.
 *
 * @param name the served model name ({@code /v1/models} lists it; requests naming another model get 404)
 * @param engine generates tokens; the server submits to it and never closes it
 * @param tokenizer the model's tokenizer
 * @param chatTemplate renders {@code /v1/chat/completions}' messages, or null when the model has none (that endpoint
 *     then answers 400)
 */
public record ServedModel(String name, GenerationEngine engine, ServingTokenizer tokenizer, ChatTemplate chatTemplate) {

    /** Validates the values. */
    public ServedModel {
        if (name == null || name.isBlank()) {
            throw new IllegalArgumentException("a served model needs a name, got " + (name == null ? "none" : "\"" + name + "\""));
        }
        Objects.requireNonNull(engine, "engine");
        Objects.requireNonNull(tokenizer, "tokenizer");
    }

    /**
     * Renders a chat with the generation prompt (the template is used by one request at a time).
     *
     * @param messages the messages
     * @param variables more template variables
     * @param addGenerationPrompt end with what starts the assistant's turn
     * @return the prompt text
     */
    String renderChat(List<Map<String, Object>> messages, Map<String, Object> variables, boolean addGenerationPrompt) {
        synchronized (chatTemplate) {
            return chatTemplate.render(messages, null, addGenerationPrompt, variables);
        }
    }
}
