package io.mcore4j.samples.pretrain;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.data.preprocess.StrictJson;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * {@code pretrain-gpt --sft} on the tiny random Qwen2 and LLaMA models of scripts/hf/make_chat_fixtures.py (data's
 * test resources: a model, its tokenizer and its real chat template): the first iteration's loss is transformers'
 * mean cross-entropy over the conversation's assistant tokens (sft_loss.json, which also holds the loss over every
 * token, far from it), so the assistant mask reached the loss; the tokenized conversations are cached and reused;
 * bad lines and flags are refused with one line and exit code 2.
 */
class PretrainGptSftTest {
    static final Path CHAT = Path.of("..", "data", "src", "test", "resources", "io", "mcore4j", "data", "chat");

    @TempDir
    Path tmp;

    /** The conversation of sft_loss.json as one JSON Lines record, and the fixture's expected losses. */
    @SuppressWarnings("unchecked")
    private static Map<String, Object> lossCase(String model) throws Exception {
        return (Map<String, Object>) StrictJson.parse(Files.readString(CHAT.resolve(model).resolve("sft_loss.json")));
    }

    @SuppressWarnings("unchecked")
    private static String line(String model, String title) throws Exception {
        Map<String, Object> expected = (Map<String, Object>) StrictJson.parseKeepingIntegers(
                Files.readString(CHAT.resolve(model).resolve("expected.json")));
        for (Object o : (List<Object>) expected.get("cases")) {
            Map<String, Object> c = (Map<String, Object>) o;
            if (title.equals(c.get("title"))) {
                Map<String, Object> record = new java.util.LinkedHashMap<>();
                record.put("messages", c.get("messages"));
                record.put("tools", c.get("tools"));
                record.put("chat_template_kwargs", c.get("kwargs"));
                return new com.google.gson.GsonBuilder().disableHtmlEscaping().serializeNulls().create().toJson(record);
            }
        }
        throw new AssertionError(title);
    }

    private List<String> flags(String model, Path data, int seq, String... more) {
        Path dir = CHAT.resolve(model);
        List<String> f = new ArrayList<>(List.of("--sft", "--load-hf", dir.toString(), "--tokenizer-type",
                "HuggingFaceTokenizer", "--tokenizer-model", dir.toString(), "--data-path", data.toString(),
                "--data-cache-path", tmp.resolve("cache").toString(), "--seq-length", String.valueOf(seq),
                "--micro-batch-size", "1", "--global-batch-size", "1", "--train-iters", "2", "--lr", "0", "--min-lr", "0",
                "--split", "1,0,0", "--make-vocab-size-divisible-by", "1", "--log-interval", "1",
                "--metrics-dir", tmp.resolve("metrics").toString()));
        f.addAll(List.of(more));
        return f;
    }

    @ParameterizedTest
    @ValueSource(strings = {"qwen2", "llama"})
    void theLossIsTransformersLossOverTheAssistantTokens(String model) throws Exception {
        Map<String, Object> expected = lossCase(model);
        Path data = tmp.resolve("chats.jsonl");
        Files.writeString(data, line(model, (String) expected.get("case")) + "\n");
        int seq = ((Number) expected.get("seq_length")).intValue();
        ByteArrayOutputStream text = new ByteArrayOutputStream();
        List<Double> losses = PretrainGpt.run(PretrainArgs.parse(flags(model, data, seq).toArray(String[]::new)),
                new PrintStream(text, true, StandardCharsets.UTF_8));
        double loss = ((Number) expected.get("loss")).doubleValue();
        double unmasked = ((Number) expected.get("unmasked_loss")).doubleValue();
        assertEquals(loss, losses.get(0), 2e-5 * loss, text.toString(StandardCharsets.UTF_8));
        assertTrue(Math.abs(unmasked - loss) > 0.1, "the fixture tells the masked loss from the unmasked one");
        assertTrue(text.toString(StandardCharsets.UTF_8).contains(" > tokenized 1 conversations"));

        ByteArrayOutputStream again = new ByteArrayOutputStream();
        List<Double> rerun = PretrainGpt.run(PretrainArgs.parse(flags(model, data, seq).toArray(String[]::new)),
                new PrintStream(again, true, StandardCharsets.UTF_8));
        assertTrue(again.toString(StandardCharsets.UTF_8).contains(" > reusing the tokenized conversations"),
                again.toString(StandardCharsets.UTF_8));
        assertEquals(losses, rerun);
    }

    @Test
    void badLinesAndFlagsAreOneLineAndExitCodeTwo() throws Exception {
        Path data = tmp.resolve("bad.jsonl");
        Files.writeString(data, line("qwen2", "system and one turn") + "\n{\"messages\": [}\n");
        assertTrue(PretrainRuns.runRefusal(flags("qwen2", data, 96)).contains(data + ":2:15: "));
        List<String> noTokenizer = flags("qwen2", data, 96);
        noTokenizer.set(noTokenizer.indexOf("--tokenizer-type") + 1, "ByteLevel");
        noTokenizer.remove(noTokenizer.indexOf("--tokenizer-model") + 1);
        noTokenizer.remove("--tokenizer-model");
        assertTrue(PretrainRuns.refusal(noTokenizer.toArray(String[]::new)).contains("--sft needs --tokenizer-type HuggingFaceTokenizer"));
        List<String> templateAlone = flags("qwen2", data, 96, "--chat-template", "x.jinja");
        templateAlone.remove("--sft");
        assertTrue(PretrainRuns.refusal(templateAlone.toArray(String[]::new)).contains("--chat-template x.jinja needs --sft"));
        assertTrue(PretrainRuns.refusal(flags("qwen2", tmp.resolve("missing.jsonl"), 96).toArray(String[]::new))
                .contains("does not exist; with --sft"));
        // the template refuses the conversation: its raise_exception message, with the file and line
        Files.writeString(data, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"user\","
                + " \"content\": \"b\"}, {\"role\": \"assistant\", \"content\": \"c\"}]}\n");
        Path mistral = CHAT.resolve("mistral").resolve("chat_template.jinja");
        assertTrue(PretrainRuns.runRefusal(flags("qwen2", data, 96, "--chat-template", mistral.toString())).contains(data + ":1: " + mistral
                + " raised: After the optional system message, conversation roles must alternate"));
    }
}
