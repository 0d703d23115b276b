package io.mcore4j.server;

import static io.mcore4j.server.OpenAiClient.choice;
import static io.mcore4j.server.OpenAiClient.events;
import static io.mcore4j.server.OpenAiClient.json;
import static io.mcore4j.server.OpenAiClient.streamedText;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.data.chat.ChatTemplate;
import io.mcore4j.data.preprocess.HuggingFaceTokenizerAdapter;
import io.mcore4j.inference.Completion;
import io.mcore4j.inference.Generator;
import io.mcore4j.inference.SamplingParams;
import io.mcore4j.inference.SerialGenerationEngine;

import java.net.http.HttpResponse;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * End to end on a real model: the tiny Llama served by {@link SerialGenerationEngine} answers with the text of the
 * tokens {@link Generator#generate} picks for the same prompt and sampling parameters (greedy and seeded sampling,
 * whole and streamed, completions and chat through the model's own chat template), and requests sent at once are
 * each answered as if alone.
 */
class SerialEngineServerTest {
    private static TinyLlama llama;
    private static HuggingFaceTokenizerAdapter tokenizer;
    private static ChatTemplate template;
    private static SerialGenerationEngine engine;
    private static OpenAiServer server;
    private static OpenAiClient client;
    private static int eos;

    @BeforeAll
    static void start() throws Exception {
        llama = new TinyLlama();
        tokenizer = HuggingFaceTokenizerAdapter.load(TinyLlama.DIR, null);
        template = ChatTemplate.load(TinyLlama.DIR, null);
        eos = tokenizer.endOfDocument().getAsInt();
        engine = new SerialGenerationEngine(llama.model, llama.vocabulary, eos, 8);
        server = OpenAiServer.start(new ServedModel("tiny-llama", engine, ServingTokenizer.of(tokenizer), template),
                ServerConfig.of("127.0.0.1", 0));
        client = new OpenAiClient(server.port());
    }

    @AfterAll
    static void stop() {
        server.close();
        engine.close();
        tokenizer.close();
        llama.close();
    }

    /** What the generator gives alone: the text and OpenAI's finish reason. */
    private static String[] reference(int[] prompt, SamplingParams params) {
        Completion c;
        synchronized (SerialEngineServerTest.class) { // the engine's thread may run the model too: one pass at a time
            c = new Generator(llama.model, llama.vocabulary, eos).generate(List.of(prompt), params).get(0);
        }
        return new String[] {tokenizer.decode(c.tokens(), true),
            c.finishReason() == Completion.FinishReason.LENGTH ? "length" : "stop"};
    }

    @Test
    void greedyCompletionIsTheGeneratorsText() throws Exception {
        String prompt = "The quick brown fox";
        String[] expected = reference(tokenizer.encode(prompt), SamplingParams.greedy(24));
        String body = "{\"model\": \"tiny-llama\", \"prompt\": \"" + prompt + "\", \"max_tokens\": 24, \"temperature\": 0";
        Map<String, Object> answer = json(client.post("/v1/completions", body + "}"));
        assertEquals(expected[0], choice(answer).get("text"));
        assertEquals(expected[1], choice(answer).get("finish_reason"));
        List<Map<String, Object>> events = events(client.post("/v1/completions", body + ", \"stream\": true}"));
        assertEquals(expected[0], streamedText(events));
        assertEquals(expected[1], choice(events.get(events.size() - 1)).get("finish_reason"));
        assertTrue(!expected[0].isEmpty(), "the tiny model writes something");
    }

    @Test
    void seededSamplingIsTheGeneratorsToo() throws Exception {
        String prompt = "Once upon a time";
        String[] expected = reference(tokenizer.encode(prompt), SamplingParams.sample(0.9, 40, 0.95, 20, 1234));
        Map<String, Object> answer = json(client.post("/v1/completions", "{\"prompt\": \"" + prompt
                + "\", \"max_tokens\": 20, \"temperature\": 0.9, \"top_k\": 40, \"top_p\": 0.95, \"seed\": 1234,"
                + " \"logprobs\": 0}"));
        assertEquals(expected[0], choice(answer).get("text"));
        List<?> logprobs = (List<?>) ((Map<?, ?>) choice(answer).get("logprobs")).get("token_logprobs");
        assertEquals(((Map<?, ?>) answer.get("usage")).get("completion_tokens"), (long) logprobs.size());
        for (Object lp : logprobs) {
            assertTrue((Double) lp <= 0 && Double.isFinite((Double) lp), "a log-probability: " + lp);
        }
    }

    @Test
    void chatUsesTheModelsTemplate() throws Exception {
        List<Map<String, Object>> messages = List.of(message("system", "You are terse."), message("user", "Hello there"));
        String rendered = template.render(messages, null, true, Map.of());
        String[] expected = reference(tokenizer.encodeWithSpans(rendered, false).ids(), SamplingParams.greedy(16));
        String body = "{\"max_tokens\": 16, \"temperature\": 0, \"messages\": [{\"role\": \"system\", \"content\":"
                + " \"You are terse.\"}, {\"role\": \"user\", \"content\": \"Hello there\"}]";
        Map<String, Object> answer = json(client.post("/v1/chat/completions", body + "}"));
        assertEquals(expected[0], ((Map<?, ?>) choice(answer).get("message")).get("content"));
        assertEquals((long) tokenizer.encodeWithSpans(rendered, false).ids().length,
                ((Map<?, ?>) answer.get("usage")).get("prompt_tokens"));
        assertEquals(expected[0], streamedText(events(client.post("/v1/chat/completions", body + ", \"stream\": true}"))));
    }

    @Test
    void requestsSentAtOnceAreEachAnsweredAsIfAlone() throws Exception {
        List<String> prompts = List.of("a b c", "Hello", "1 2 3 4", "zzz", "The end");
        List<String> expected = new ArrayList<>();
        for (String p : prompts) {
            expected.add(reference(tokenizer.encode(p), SamplingParams.greedy(10))[0]);
        }
        ExecutorService pool = Executors.newFixedThreadPool(prompts.size());
        try {
            List<Future<HttpResponse<String>>> answers = new ArrayList<>();
            for (int k = 0; k < prompts.size(); k++) {
                String body = "{\"prompt\": \"" + prompts.get(k) + "\", \"max_tokens\": 10, \"temperature\": 0, \"stream\": "
                        + (k % 2 == 0) + "}";
                answers.add(pool.submit(() -> client.post("/v1/completions", body)));
            }
            for (int k = 0; k < prompts.size(); k++) {
                HttpResponse<String> r = answers.get(k).get();
                assertEquals(expected.get(k), k % 2 == 0 ? streamedText(events(r)) : choice(json(r)).get("text"), prompts.get(k));
            }
        } finally {
            pool.shutdownNow();
        }
    }

    private static Map<String, Object> message(String role, String content) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("role", role);
        m.put("content", content);
        return m;
    }
}
