package io.mcore4j.data.chat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

import java.util.List;

/**
 * The real chat templates of Qwen2.5, Qwen3, Llama 3.2 and Mistral v0.3 render exactly the text transformers'
 * apply_chat_template gives (expected.json of scripts/hf/make_chat_fixtures.py), and refuse what transformers
 * refuses with its message.
 */
class ChatTemplateTest {
    static List<ChatFixtures.Case> cases() {
        return ChatFixtures.cases();
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
