package io.mcore4j.data.chat;

import com.hubspot.jinjava.tree.Node;
import io.mcore4j.data.preprocess.JsonSyntaxException;
import io.mcore4j.data.preprocess.StrictJson;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.regex.Pattern;

/**
 * A Hugging Face chat template, rendered as transformers' {@code apply_chat_template(messages, tools=tools,
 * tokenize=False, add_generation_prompt=...)} renders it: the same text for the Jinja templates of Llama 3,
 * Qwen2.5, Qwen3 and Mistral, with the tokenizer's special tokens ({@code bos_token}, {@code eos_token}, ...)
 * as variables. The Jinja engine is HubSpot's jinjava, made to behave as Python's Jinja where templates need it
 * ({@link ChatJinja}); a construct it cannot render is a {@link ChatTemplateException} naming the template and
 * the construct, never a different text.
 *
 * <p>Where the template comes from, as transformers 5 reads a tokenizer directory: {@code chat_template.jinja},
 * else the {@code chat_template} of {@code tokenizer_config.json} (a string, or a list of named templates of
 * which {@code default} is taken). An instance renders one conversation at a time.
 */
public final class ChatTemplate {
    private static final Pattern GENERATION_TAG = Pattern.compile("\\{%-?\\s*generation\\s*-?%}");
    private static final List<String> SPECIAL_TOKENS = List.of("bos_token", "eos_token", "unk_token", "sep_token",
            "pad_token", "cls_token", "mask_token");

    private final String source;
    private final String origin;
    private final Map<String, Object> specialTokens;
    private final ChatJinja jinja = new ChatJinja();
    private final Node root;

    private ChatTemplate(String source, String origin, Map<String, Object> specialTokens) {
        this.source = source;
        this.origin = origin;
        this.specialTokens = Collections.unmodifiableMap(new LinkedHashMap<>(specialTokens));
        this.root = jinja.parse(source, origin);
    }

    /**
     * A template from its text.
     *
     * @param source the Jinja text
     * @param origin where it came from, for messages (a file name)
     * @param specialTokens the tokenizer's special tokens by name ({@code bos_token}, {@code eos_token}, ...)
     * @return the template
     * @throws ChatTemplateException if the template cannot be parsed
     */
    public static ChatTemplate of(String source, String origin, Map<String, ?> specialTokens) {
        return new ChatTemplate(source, origin, new LinkedHashMap<>(specialTokens));
    }

    /**
     * The chat template of a Hugging Face tokenizer, or another template with the tokenizer's special tokens.
     *
     * @param tokenizer a tokenizer directory, or its {@code tokenizer.json} (the directory is read)
     * @param templateFile a Jinja file to use instead of the tokenizer's template, or null
     * @return the template
     * @throws IOException if a file cannot be read
     * @throws IllegalArgumentException if the tokenizer has no template (and none is given), or its
     *     {@code tokenizer_config.json} is not valid
     */
    public static ChatTemplate load(Path tokenizer, Path templateFile) throws IOException {
        return find(tokenizer, templateFile).orElseThrow(() -> new IllegalArgumentException(directory(tokenizer)
                + " has no chat template (neither chat_template.jinja nor a chat_template in tokenizer_config.json)"));
    }

    /**
     * The chat template of a Hugging Face tokenizer if it has one, or another template with the tokenizer's special
     * tokens: {@link #load}'s template, or empty where {@link #load} finds none.
     *
     * @param tokenizer a tokenizer directory, or its {@code tokenizer.json} (the directory is read)
     * @param templateFile a Jinja file to use instead of the tokenizer's template, or null
     * @return the template; empty if the tokenizer has none and no file is given
     * @throws IOException if a file cannot be read
     * @throws IllegalArgumentException if the tokenizer's {@code tokenizer_config.json} is not valid, or names
     *     templates but none {@code default}
     */
    public static Optional<ChatTemplate> find(Path tokenizer, Path templateFile) throws IOException {
        Path dir = directory(tokenizer);
        Path configFile = dir.resolve("tokenizer_config.json");
        Map<?, ?> config = Map.of();
        if (Files.isRegularFile(configFile)) {
            try {
                if (!(StrictJson.parse(Files.readString(configFile, StandardCharsets.UTF_8)) instanceof Map<?, ?> m)) {
                    throw new IllegalArgumentException(configFile + " is not a JSON object");
                }
                config = m;
            } catch (JsonSyntaxException e) {
                throw new IllegalArgumentException(configFile + " is not valid JSON: " + e.getMessage(), e);
            }
        }
        Map<String, Object> specials = new LinkedHashMap<>();
        for (String name : SPECIAL_TOKENS) {
            String token = tokenText(config.get(name));
            if (token != null) {
                specials.put(name, token);
            }
        }
        if (config.get("additional_special_tokens") instanceof List<?> more) {
            List<String> texts = new ArrayList<>();
            more.forEach(t -> texts.add(tokenText(t)));
            specials.put("additional_special_tokens", texts);
        }
        if (templateFile != null) {
            return Optional.of(new ChatTemplate(Files.readString(templateFile, StandardCharsets.UTF_8),
                    templateFile.toString(), specials));
        }
        Path jinjaFile = dir.resolve("chat_template.jinja");
        if (Files.isRegularFile(jinjaFile)) {
            return Optional.of(new ChatTemplate(Files.readString(jinjaFile, StandardCharsets.UTF_8), jinjaFile.toString(),
                    specials));
        }
        Object template = config.get("chat_template");
        if (template instanceof String text) {
            return Optional.of(new ChatTemplate(text, configFile + " (chat_template)", specials));
        }
        if (template instanceof List<?> named) {
            List<String> names = new ArrayList<>();
            for (Object entry : named) {
                if (entry instanceof Map<?, ?> m && m.get("name") instanceof String name && m.get("template") instanceof String text) {
                    if (name.equals("default")) {
                        return Optional.of(new ChatTemplate(text, configFile + " (chat_template \"default\")", specials));
                    }
                    names.add(name);
                }
            }
            throw new IllegalArgumentException(configFile + " names chat templates " + names + " but none \"default\"");
        }
        return Optional.empty();
    }

    /** @return the tokenizer's directory: {@code tokenizer} itself, or the directory of its {@code tokenizer.json} */
    private static Path directory(Path tokenizer) {
        return Files.isDirectory(tokenizer) ? tokenizer : tokenizer.toAbsolutePath().getParent();
    }

    /** A special token's text: a string, or an added token's {@code content}. */
    private static String tokenText(Object token) {
        if (token instanceof String text) {
            return text;
        }
        return token instanceof Map<?, ?> m && m.get("content") instanceof String content ? content : null;
    }

    /**
     * Renders a conversation.
     *
     * @param messages the messages: maps with a {@code role}, {@code content} and whatever else the template reads
     *     ({@code tool_calls}, {@code reasoning_content}); numbers as {@link Long} and {@link Double}
     * @param tools the tools' JSON schemas, or null
     * @param addGenerationPrompt end with what starts the assistant's next turn
     * @param variables more template variables ({@code enable_thinking}, {@code date_string}), may be empty
     * @return the text
     * @throws ChatTemplateException if the template refuses the conversation or cannot be rendered
     */
    public String render(List<? extends Map<String, Object>> messages, List<?> tools, boolean addGenerationPrompt,
                         Map<String, ?> variables) {
        return jinja.render(root, origin, bindings(messages, tools, addGenerationPrompt, variables));
    }

    /** Renders without a generation prompt, keeping the text each message's loop iterations wrote. */
    RenderedChat renderTracked(List<? extends Map<String, Object>> messages, List<?> tools, Map<String, ?> variables) {
        Map<String, Object> bindings = bindings(messages, tools, false, variables);
        bindings.put(ChatJinja.TRACKER, new MessageLoopTag.Tracker(messages));
        return RenderedChat.parse(jinja.render(root, origin, bindings), messages.size(), origin);
    }

    private Map<String, Object> bindings(List<? extends Map<String, Object>> messages, List<?> tools,
                                         boolean addGenerationPrompt, Map<String, ?> variables) {
        Map<String, Object> bindings = new HashMap<>(specialTokens);
        bindings.putAll(variables);
        bindings.put("messages", messages);
        if (tools != null) {
            bindings.put("tools", tools);
        }
        bindings.put("add_generation_prompt", addGenerationPrompt);
        return bindings;
    }

    /** @return whether the template marks what the assistant generates with {@code {% generation %}} */
    public boolean hasGenerationTags() {
        return GENERATION_TAG.matcher(source).find();
    }

    /** @return the Jinja text */
    public String source() {
        return source;
    }

    /** @return where the template came from (a file), as messages name it */
    public String origin() {
        return origin;
    }

    /** @return the special tokens the template sees by name, never null */
    public Map<String, Object> specialTokens() {
        return specialTokens;
    }
}
