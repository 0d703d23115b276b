package io.mcore4j.data.chat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.LocalDateTime;
import java.util.List;
import java.util.Map;

/**
 * The real chat templates of Qwen2.5, Qwen3, Llama 3.2 and Mistral v0.3 render exactly the text transformers'
 * apply_chat_template gives (expected.json of scripts/hf/make_chat_fixtures.py), and refuse what transformers
 * refuses with its message.
 */
class ChatTemplateTest {
    static List<ChatFixtures.Case> cases() {
        return ChatFixtures.cases();
    }

    @Test
    @SuppressWarnings("unchecked")
    void strftimeIsPythons() {
        for (Object o : (List<Object>) ChatFixtures.expected("llama").get("strftime")) {
            Map<String, Object> c = (Map<String, Object>) o;
            assertEquals(c.get("text"), Strftime.format(LocalDateTime.parse((String) c.get("date")), (String) c.get("format")));
        }
    }

    @Test
    void whatJinjavaCannotRenderIsAnErrorNamingTheConstruct() {
        ChatTemplate stepped = ChatTemplate.of("{{ messages[0].content[0:4:2] }}", "stepped.jinja", Map.of());
        ChatTemplateException e = assertThrows(ChatTemplateException.class,
                () -> stepped.render(List.of(Map.of("role", "user", "content", "abcd")), null, false, Map.of()));
        assertTrue(e.getMessage().startsWith("chat template stepped.jinja, line 1: jinjava cannot render")
                && e.getMessage().contains("'messages[0].content[0:4:2]'"), e.getMessage());
        ChatTemplate method = ChatTemplate.of("hi\n{{ messages[0].content.zfill(5) }}", "zfill.jinja", Map.of());
        e = assertThrows(ChatTemplateException.class,
                () -> method.render(List.of(Map.of("role", "user", "content", "7")), null, false, Map.of()));
        assertTrue(e.getMessage().startsWith("chat template zfill.jinja, line 2: jinjava cannot render in "
                + "'messages[0].content.zfill(5)'"), e.getMessage());
    }

    @Test
    void namedTemplatesAndSpecialTokensComeFromTokenizerConfig(@TempDir Path dir) throws Exception {
        Files.writeString(dir.resolve("tokenizer_config.json"), "{\"bos_token\": {\"content\": \"<s>\"}, \"eos_token\":"
                + " \"</s>\", \"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"}, {\"name\": \"default\","
                + " \"template\": \"{{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}\"}]}");
        List<Map<String, Object>> chat = List.of(Map.of("role", "user", "content", "hi"));
        assertEquals("<s>hi</s>", ChatTemplate.load(dir, null).render(chat, null, false, Map.of()));
        Files.writeString(dir.resolve("chat_template.jinja"), "[{{ messages[0].content }}]");
        assertEquals("[hi]", ChatTemplate.load(dir, null).render(chat, null, false, Map.of()), "transformers 5's file first");
        assertEquals("<s>", ChatTemplate.load(dir, null).specialTokens().get("bos_token"));
    }

    @Test
    void aTokenizerWithoutATemplateIsFoundEmptyAndRefusedByLoad(@TempDir Path dir) throws Exception {
        Files.writeString(dir.resolve("tokenizer_config.json"), "{\"bos_token\": \"<s>\"}");
        assertTrue(ChatTemplate.find(dir, null).isEmpty());
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> ChatTemplate.load(dir, null));
        assertEquals(dir + " has no chat template (neither chat_template.jinja nor a chat_template in tokenizer_config.json)",
                e.getMessage());
        Path file = Files.writeString(dir.resolve("other.jinja"), "{{ bos_token }}");
        assertEquals("<s>", ChatTemplate.find(dir, file).orElseThrow().render(List.of(), null, false, Map.of()));
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("cases")
    void rendersAsTransformers(ChatFixtures.Case c) throws Exception {
        ChatTemplate template = ChatTemplate.load(c.dir(), c.templateFile());
        boolean prompt = Boolean.TRUE.equals(c.json().get("add_generation_prompt"));
        if (c.json().containsKey("error")) {
            ChatTemplateException e = assertThrows(ChatTemplateException.class,
                    () -> template.render(c.messages(), c.tools(), prompt, c.kwargs()));
            assertTrue(e.getMessage().endsWith("raised: " + c.json().get("error")), e.getMessage());
            return;
        }
        assertEquals(c.json().get("text"), template.render(c.messages(), c.tools(), prompt, c.kwargs()));
    }
}
