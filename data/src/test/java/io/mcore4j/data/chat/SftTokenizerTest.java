package io.mcore4j.data.chat;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.data.preprocess.HuggingFaceTokenizerAdapter;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;
import org.junit.jupiter.params.provider.ValueSource;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Token ids and assistant masks against transformers (expected.json of scripts/hf/make_chat_fixtures.py, whose
 * masks come from return_assistant_tokens_mask on generation-tagged copies of the templates): the real templates
 * through mcore4j's loop tracking, the tagged copies through its {% generation %} support, and prompt/completion
 * pairs.
 */
class SftTokenizerTest {
    static List<ChatFixtures.Case> chats() {
        List<ChatFixtures.Case> out = new ArrayList<>();
        for (ChatFixtures.Case c : ChatFixtures.cases()) {
            if (c.json().containsKey("assistant_mask")) {
                out.add(c);
            }
        }
        return out;
    }

    private static SftExample.Conversation conversation(ChatFixtures.Case c) {
        Map<String, Object> line = new LinkedHashMap<>();
        line.put("messages", c.messages());
        line.put("tools", c.tools());
        line.put("chat_template_kwargs", c.kwargs());
        return (SftExample.Conversation) SftExample.parse(PythonValues.json(line, null, false));
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("chats")
    void idsAndAssistantMaskAreTransformers(ChatFixtures.Case c) throws Exception {
        int[] ids = ChatFixtures.ints(c.json().get("ids"));
        int[] mask = ChatFixtures.ints(c.json().get("assistant_mask"));
        try (HuggingFaceTokenizerAdapter tok = HuggingFaceTokenizerAdapter.load(c.dir(), null)) {
            SftExample.Conversation chat = conversation(c);
            SftTokenizer.Tokens plain = new SftTokenizer(ChatTemplate.load(c.dir(), c.templateFile()), tok).tokenize(chat);
            assertArrayEquals(ids, plain.ids(), "ids");
            assertArrayEquals(mask, toInts(plain.lossMask()), "mask from the template's loops");
            ChatTemplate tagged = ChatTemplate.load(c.dir(), c.dir().resolve("training").resolve(c.template() + ".jinja"));
            SftTokenizer.Tokens viaTags = new SftTokenizer(tagged, tok).tokenize(chat);
            assertArrayEquals(ids, viaTags.ids(), "ids (tagged copy)");
            assertArrayEquals(mask, toInts(viaTags.lossMask()), "mask from {% generation %}");
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"qwen2", "llama"})
    @SuppressWarnings("unchecked")
    void promptCompletionPairsTrainTheCompletion(String directory) throws Exception {
        var dir = ChatFixtures.ROOT.resolve(directory);
        try (HuggingFaceTokenizerAdapter tok = HuggingFaceTokenizerAdapter.load(dir, null)) {
            SftTokenizer sft = new SftTokenizer(ChatTemplate.load(dir, null), tok);
            for (Object o : (List<Object>) ChatFixtures.expected(directory).get("pairs")) {
                Map<String, Object> pair = (Map<String, Object>) o;
                SftTokenizer.Tokens t = sft.tokenize(new SftExample.PromptCompletion((String) pair.get("prompt"),
                        (String) pair.get("completion")));
                assertArrayEquals(ChatFixtures.ints(pair.get("ids")), t.ids());
                assertArrayEquals(ChatFixtures.ints(pair.get("completion_mask")), toInts(t.lossMask()));
            }
        }
    }

    @Test
    void aPromptGivenAsMessagesIsNotTrained() throws Exception {
        ChatFixtures.Case twoTurns = chats().stream().filter(c -> c.toString().contains("qwen2.5: default system prompt"))
                .findFirst().orElseThrow();
        try (HuggingFaceTokenizerAdapter tok = HuggingFaceTokenizerAdapter.load(twoTurns.dir(), null)) {
            SftTokenizer sft = new SftTokenizer(ChatTemplate.load(twoTurns.dir(), null), tok);
            List<Map<String, Object>> m = twoTurns.messages();
            String line = PythonValues.json(Map.of("prompt", m.subList(0, 3), "completion", m.subList(3, 4)), null, false);
            SftTokenizer.Tokens t = sft.tokenize(SftExample.parse(line));
            int[] expected = ChatFixtures.ints(twoTurns.json().get("assistant_mask"));
            int lastTurn = expected.length - 1;
            while (expected[lastTurn - 1] == 1 || expected[lastTurn] == 0) {
                lastTurn--; // back to the first token of the last run of trained tokens: the completion's turn
            }
            java.util.Arrays.fill(expected, 0, lastTurn, 0);
            assertArrayEquals(ChatFixtures.ints(twoTurns.json().get("ids")), t.ids());
            assertArrayEquals(expected, toInts(t.lossMask()), "only the completion's assistant turn");
            assertTrue(lastTurn > 0 && expected[lastTurn] == 1);
        }
    }

    @Test
    void aTurnThatCannotBeFoundIsAnError() throws Exception {
        Path qwen2 = ChatFixtures.ROOT.resolve("qwen2");
        SftExample chat = SftExample.parse("{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\":"
                + " \"assistant\", \"content\": \"b\"}]}");
        Map<String, String> cases = Map.of(
                "{% for m in messages %}{% if m.role == 'user' %}{{ m.content }}{% endif %}{% endfor %}{{ messages[1].content }}",
                "writes nothing for assistant message 1 inside a loop over the messages",
                "{% for m in messages %}{{ m.content }}{% endfor %}{% for m in messages %}{{ m.content }}{% endfor %}",
                "writes assistant message 1 in 2 places",
                "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<bot>{% endif %}",
                "does not begin assistant message 1 with its generation prompt \"<bot>\" but with \"<assistant>b\"");
        try (HuggingFaceTokenizerAdapter tok = HuggingFaceTokenizerAdapter.load(qwen2, null)) {
            for (Map.Entry<String, String> c : cases.entrySet()) {
                SftTokenizer sft = new SftTokenizer(ChatTemplate.of(c.getKey(), "t.jinja", Map.of()), tok);
                ChatTemplateException e = assertThrows(ChatTemplateException.class, () -> sft.tokenize(chat));
                assertTrue(e.getMessage().startsWith("chat template t.jinja " + c.getValue()), e.getMessage());
            }
        }
    }

    static int[] toInts(byte[] mask) {
        int[] out = new int[mask.length];
        for (int k = 0; k < mask.length; k++) {
            out[k] = mask[k];
        }
        assertEquals(mask.length, out.length);
        return out;
    }
}
