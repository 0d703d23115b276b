package io.mcore4j.server;

import static io.mcore4j.server.OpenAiClient.choice;
import static io.mcore4j.server.OpenAiClient.error;
import static io.mcore4j.server.OpenAiClient.events;
import static io.mcore4j.server.OpenAiClient.json;
import static io.mcore4j.server.OpenAiClient.streamedText;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.data.chat.ChatTemplate;

import java.io.BufferedReader;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.function.IntSupplier;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * The server through Java's HTTP client against {@link ScriptedEngine}, whose tokens are known in advance: both
 * endpoints whole and streamed in OpenAI's shapes, stop strings and stop ids, log-probabilities, concurrent clients,
 * every kind of bad request (400 naming the field, 404, 405), a client that leaves mid-stream (the engine sees the
 * cancel), a full engine (429) and a closed one (503).
 */
class OpenAiServerTest {
    /** A chat template a test can render by hand. */
    static final String TEMPLATE = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
            + "{% if add_generation_prompt %}<assistant>{% endif %}";

    private static ScriptedEngine engine;
    private static OpenAiServer server;
    private static OpenAiClient client;

    @BeforeAll
    static void start() throws Exception {
        engine = new ScriptedEngine(16, 1);
        server = OpenAiServer.start(model(engine), ServerConfig.of("127.0.0.1", 0));
        client = new OpenAiClient(server.port());
    }

    @AfterAll
    static void stop() {
        server.close();
        engine.close();
    }

    static ServedModel model(ScriptedEngine e) {
        return new ServedModel("tiny", e, new CharTokenizer(), ChatTemplate.of(TEMPLATE, "test", Map.of()));
    }

    @Test
    void completionIsWholeWithUsage() throws Exception {
        HttpResponse<String> r = client.post("/v1/completions", "{\"model\": \"tiny\", \"prompt\": \"abc\", \"max_tokens\": 5}");
        assertEquals(200, r.statusCode(), r.body());
        Map<String, Object> answer = json(r);
        assertEquals("text_completion", answer.get("object"));
        assertTrue(((String) answer.get("id")).startsWith("cmpl-"));
        assertEquals("tiny", answer.get("model"));
        assertEquals("ABCAB", choice(answer).get("text"));
        assertEquals("length", choice(answer).get("finish_reason"));
        assertNull(choice(answer).get("logprobs"));
        assertEquals(Map.of("prompt_tokens", 3L, "completion_tokens", 5L, "total_tokens", 8L), answer.get("usage"));
    }

    @Test
    void completionDefaultsToSixteenTokensAndTakesTokenIdsAndEcho() throws Exception {
        Map<String, Object> answer = json(client.post("/v1/completions", "{\"prompt\": \"ab\"}"));
        assertEquals(ScriptedEngine.expected("ab", 16), choice(answer).get("text"));
        answer = json(client.post("/v1/completions", "{\"prompt\": [104, 105], \"max_tokens\": 3, \"echo\": true}"));
        assertEquals("hiHIH", choice(answer).get("text"));
        answer = json(client.post("/v1/completions", "{\"prompt\": [[104, 105]], \"max_tokens\": 2}"));
        assertEquals("HI", choice(answer).get("text"));
    }

    @Test
    void completionStreamsChunksThenUsageThenDone() throws Exception {
        List<Map<String, Object>> events = events(client.post("/v1/completions", "{\"prompt\": \"abc\", \"max_tokens\": 5,"
                + " \"stream\": true, \"stream_options\": {\"include_usage\": true}}"));
        assertEquals("ABCAB", streamedText(events));
        Map<String, Object> usage = events.get(events.size() - 1);
        assertEquals(List.of(), usage.get("choices"));
        assertEquals(Map.of("prompt_tokens", 3L, "completion_tokens", 5L, "total_tokens", 8L), usage.get("usage"));
        List<Map<String, Object>> chunks = events.subList(0, events.size() - 1);
        assertTrue(chunks.size() >= 2, "one chunk per token: " + chunks);
        for (int k = 0; k < chunks.size(); k++) {
            assertEquals("text_completion", chunks.get(k).get("object"));
            assertEquals(chunks.get(0).get("id"), chunks.get(k).get("id"));
            assertTrue(chunks.get(k).containsKey("usage") && chunks.get(k).get("usage") == null);
            assertEquals(k == chunks.size() - 1 ? "length" : null, choice(chunks.get(k)).get("finish_reason"));
        }
    }

    @Test
    void chatRendersTheTemplateAndAnswersAMessage() throws Exception {
        String prompt = "<system>be brief<user>hi<assistant>";
        HttpResponse<String> r = client.post("/v1/chat/completions", "{\"model\": \"tiny\", \"max_tokens\": 6, \"messages\": ["
                + "{\"role\": \"system\", \"content\": \"be brief\"}, {\"role\": \"user\", \"content\": \"hi\"}]}");
        assertEquals(200, r.statusCode(), r.body());
        Map<String, Object> answer = json(r);
        assertEquals("chat.completion", answer.get("object"));
        assertTrue(((String) answer.get("id")).startsWith("chatcmpl-"));
        assertEquals(Map.of("role", "assistant", "content", ScriptedEngine.expected(prompt, 6)), choice(answer).get("message"));
        assertEquals("length", choice(answer).get("finish_reason"));
        assertEquals(Map.of("prompt_tokens", (long) prompt.length(), "completion_tokens", 6L,
                "total_tokens", prompt.length() + 6L), answer.get("usage"));
        // text parts are joined with newlines; without max_tokens the rest of the context is the budget
        answer = json(client.post("/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": ["
                + "{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"text\", \"text\": \"b\"}]}]}"));
        String joined = "<user>a\nb<assistant>";
        assertEquals(ScriptedEngine.expected(joined, ScriptedEngine.MAX_SEQUENCE_LENGTH - joined.length()),
                ((Map<?, ?>) choice(answer).get("message")).get("content"));
    }

    @Test
    void chatStreamsARoleChunkThenDeltasThenTheFinish() throws Exception {
        List<Map<String, Object>> events = events(client.post("/v1/chat/completions", "{\"stream\": true, \"max_tokens\": 4,"
                + " \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}"));
        assertEquals(ScriptedEngine.expected("<user>hi<assistant>", 4), streamedText(events));
        assertEquals(Map.of("role", "assistant", "content", ""), choice(events.get(0)).get("delta"));
        Map<String, Object> last = choice(events.get(events.size() - 1));
        assertEquals("length", last.get("finish_reason"));
        for (Map<String, Object> e : events) {
            assertEquals("chat.completion.chunk", e.get("object"));
            assertTrue(!e.containsKey("usage"), "no usage field unless include_usage");
        }
        for (Map<String, Object> e : events.subList(1, events.size() - 1)) {
            assertNull(choice(e).get("finish_reason"));
        }
    }

    @Test
    void stopStringsCutTheTextAndCancelTheEngineRequest() throws Exception {
        int before = engine.cancelled.get();
        Map<String, Object> answer = json(client.post("/v1/completions", "{\"prompt\": \"abcdef\", \"max_tokens\": 30,"
                + " \"stop\": [\"zz\", \"CD\"]}"));
        assertEquals("AB", choice(answer).get("text"));
        assertEquals("stop", choice(answer).get("finish_reason"));
        List<Map<String, Object>> events = events(client.post("/v1/chat/completions", "{\"stream\": true, \"max_tokens\": 30,"
                + " \"stop\": \"ER\", \"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}"));
        assertEquals("<US", streamedText(events));
        assertEquals("stop", choice(events.get(events.size() - 1)).get("finish_reason"));
        awaitAtLeast(() -> engine.cancelled.get(), before + 2);
    }

    @Test
    void stopTokenIdsEndTheCompletion() throws Exception {
        Map<String, Object> answer = json(client.post("/v1/completions", "{\"prompt\": \"abcdef\", \"max_tokens\": 30,"
                + " \"stop_token_ids\": [68]}"));
        assertEquals("ABC", choice(answer).get("text"));
        assertEquals("stop", choice(answer).get("finish_reason"));
        assertEquals(3L, ((Map<?, ?>) answer.get("usage")).get("completion_tokens"));
    }

    @Test
    void logprobsComeInEachEndpointsFormat() throws Exception {
        Map<String, Object> answer = json(client.post("/v1/completions", "{\"prompt\": \"ab\", \"max_tokens\": 3, \"logprobs\": 0}"));
        Map<?, ?> logprobs = (Map<?, ?>) choice(answer).get("logprobs");
        assertEquals(List.of("A", "B", "A"), logprobs.get("tokens"));
        assertEquals(List.of(-0.5, -0.5, -0.5), logprobs.get("token_logprobs"));
        assertEquals(List.of(0L, 1L, 2L), logprobs.get("text_offset"));
        answer = json(client.post("/v1/chat/completions", "{\"logprobs\": true, \"max_tokens\": 2,"
                + " \"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}"));
        List<?> content = (List<?>) ((Map<?, ?>) choice(answer).get("logprobs")).get("content");
        assertEquals(Map.of("token", "<", "logprob", -0.5, "bytes", List.of(60L), "top_logprobs", List.of()), content.get(0));
        assertEquals(2, content.size());
    }

    @Test
    void concurrentClientsEachGetTheirOwnTokens() throws Exception {
        int clients = 8;
        ExecutorService pool = Executors.newFixedThreadPool(clients);
        try {
            List<Future<String>> texts = new ArrayList<>();
            for (int c = 0; c < clients; c++) {
                String prompt = "p" + (char) ('a' + c) + "q" + c;
                boolean stream = c % 2 == 0;
                texts.add(pool.submit(() -> {
                    HttpResponse<String> r = client.post("/v1/completions", "{\"prompt\": \"" + prompt
                            + "\", \"max_tokens\": 40, \"stream\": " + stream + "}");
                    return stream ? streamedText(events(r)) : (String) choice(json(r)).get("text");
                }));
            }
            for (int c = 0; c < clients; c++) {
                assertEquals(ScriptedEngine.expected("p" + (char) ('a' + c) + "q" + c, 40), texts.get(c).get());
            }
        } finally {
            pool.shutdownNow();
        }
    }

    @Test
    void badJsonIsA400() throws Exception {
        for (String body : new String[] {"{\"prompt\": ", "[1, 2]", "{\"prompt\": \"a\", \"prompt\": \"b\"}", ""}) {
            HttpResponse<String> r = client.post("/v1/completions", body);
            assertEquals(400, r.statusCode(), body + " -> " + r.body());
            assertEquals("invalid_request_error", error(r).get("type"));
            assertTrue(error(r).containsKey("param") && error(r).containsKey("code"), r.body());
        }
    }

    @ParameterizedTest
    @CsvSource(delimiter = '|', quoteCharacter = '"', value = {
        "/v1/completions|{'prompt': 'a', 'temperature': -1}|temperature",
        "/v1/completions|{'prompt': 'a', 'temperature': 'hot'}|temperature",
        "/v1/completions|{'prompt': 'a', 'top_p': 0}|top_p",
        "/v1/completions|{'prompt': 'a', 'top_k': 1.5}|top_k",
        "/v1/completions|{'prompt': 'a', 'top_k': -2}|top_k",
        "/v1/completions|{'prompt': 'a', 'max_tokens': 0}|max_tokens",
        "/v1/completions|{'prompt': 'a', 'max_tokens': 64}|max_tokens",
        "/v1/completions|{'prompt': 'a', 'n': 2}|n",
        "/v1/completions|{'prompt': 'a', 'stop': 5}|stop",
        "/v1/completions|{'prompt': 'a', 'stop': ['']}|stop",
        "/v1/completions|{'prompt': 'a', 'stop_token_ids': [128]}|stop_token_ids",
        "/v1/completions|{'prompt': 'a', 'seed': 'x'}|seed",
        "/v1/completions|{'prompt': 'a', 'min_p': -0.1}|min_p",
        "/v1/completions|{'prompt': 'a', 'min_p': 2}|min_p",
        "/v1/completions|{'prompt': 'a', 'presence_penalty': -2.5}|presence_penalty",
        "/v1/completions|{'prompt': 'a', 'frequency_penalty': 3}|frequency_penalty",
        "/v1/completions|{'prompt': 'a', 'repetition_penalty': 0}|repetition_penalty",
        "/v1/completions|{'prompt': 'a', 'logprobs': 2}|logprobs",
        "/v1/completions|{'prompt': 'a', 'stream': 'yes'}|stream",
        "/v1/completions|{'prompt': 'a', 'stream_options': {'include_usage': true}}|stream_options",
        "/v1/completions|{'prompt': 'a', 'frobnicate': 1}|frobnicate",
        "/v1/completions|{'prompt': ['a', 'b']}|prompt",
        "/v1/completions|{'prompt': [1, 300]}|prompt",
        "/v1/completions|{'prompt': ''}|prompt",
        "/v1/completions|{'max_tokens': 3}|prompt",
        "/v1/completions|{'prompt': 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'}|prompt",
        "/v1/chat/completions|{'messages': []}|messages",
        "/v1/chat/completions|{'messages': [{'content': 'x'}]}|messages[0].role",
        "/v1/chat/completions|{'messages': [{'role': 'user', 'content': 7}]}|messages[0].content",
        "/v1/chat/completions|{'messages': [{'role': 'user', 'content': 'x'}], 'top_logprobs': 2, 'logprobs': true}|top_logprobs",
        "/v1/chat/completions|{'messages': [{'role': 'user', 'content': 'x'}], 'tools': [{'type': 'function'}]}|tools",
        "/v1/chat/completions|{'messages': [{'role': 'user', 'content': 'x'}], 'max_completion_tokens': -1}|max_completion_tokens",
    })
    void badParametersAre400sNamingTheParameter(String path, String body, String param) throws Exception {
        HttpResponse<String> r = client.post(path, body.replace('\'', '"'));
        assertEquals(400, r.statusCode(), body + " -> " + r.body());
        assertEquals("invalid_request_error", error(r).get("type"), r.body());
        assertEquals(param, error(r).get("param"), r.body());
        assertTrue(((String) error(r).get("message")).length() > 10, r.body());
    }

    @Test
    void unknownModelRouteAndMethodAreNamed() throws Exception {
        HttpResponse<String> r = client.post("/v1/completions", "{\"model\": \"gpt-9\", \"prompt\": \"a\"}");
        assertEquals(404, r.statusCode());
        assertEquals("model_not_found", error(r).get("code"));
        assertEquals("model", error(r).get("param"));
        r = client.post("/v1/embeddings", "{}");
        assertEquals(404, r.statusCode());
        assertTrue(((String) error(r).get("message")).contains("/v1/embeddings"), r.body());
        r = client.get("/v1/completions");
        assertEquals(405, r.statusCode());
        assertEquals("invalid_request_error", error(r).get("type"));
    }

    @Test
    void modelsAndHealth() throws Exception {
        HttpResponse<String> r = client.get("/v1/models");
        assertEquals(200, r.statusCode());
        Map<String, Object> list = json(r);
        assertEquals("list", list.get("object"));
        Map<?, ?> card = (Map<?, ?>) ((List<?>) list.get("data")).get(0);
        assertEquals("tiny", card.get("id"));
        assertEquals("model", card.get("object"));
        assertEquals((long) ScriptedEngine.MAX_SEQUENCE_LENGTH, card.get("max_model_len"));
        assertEquals(200, client.get("/health").statusCode());
        assertEquals(200, client.get("/v1/health").statusCode());
    }

    @Test
    void aClientThatLeavesMidStreamCancelsItsRequest() throws Exception {
        try (ScriptedEngine slow = new ScriptedEngine(4, 40); OpenAiServer s = OpenAiServer.start(model(slow),
                ServerConfig.of("127.0.0.1", 0))) {
            OpenAiClient c = new OpenAiClient(s.port());
            HttpResponse<InputStream> r = c.http.send(c.request("/v1/completions",
                    "{\"prompt\": \"abc\", \"max_tokens\": 60, \"stream\": true}"), HttpResponse.BodyHandlers.ofInputStream());
            assertEquals(200, r.statusCode());
            try (BufferedReader lines = new BufferedReader(new InputStreamReader(r.body(), StandardCharsets.UTF_8))) {
                assertTrue(lines.readLine().startsWith("data: {"), "a chunk arrives while the engine still generates");
                assertEquals(0, slow.finished.get());
            }
            awaitAtLeast(slow.cancelled::get, 1);
            assertTrue(slow.tokensStreamed.get() < 60, "the engine stopped early: " + slow.tokensStreamed.get());
        }
    }

    @Test
    void aFullEngineIs429AndAClosedOneIs503() throws Exception {
        try (ScriptedEngine slow = new ScriptedEngine(1, 40); OpenAiServer s = OpenAiServer.start(model(slow),
                ServerConfig.of("127.0.0.1", 0))) {
            OpenAiClient c = new OpenAiClient(s.port());
            Future<HttpResponse<String>> running = c.http.sendAsync(c.request("/v1/completions",
                    "{\"prompt\": \"abc\", \"max_tokens\": 20}"), HttpResponse.BodyHandlers.ofString());
            awaitAtLeast(slow::pendingRequests, 1);
            HttpResponse<String> r = c.post("/v1/completions", "{\"prompt\": \"x\"}");
            assertEquals(429, r.statusCode(), r.body());
            assertEquals("rate_limit_exceeded", error(r).get("code"));
            assertEquals(200, running.get().statusCode(), "the running request is unharmed");
            assertEquals(ScriptedEngine.expected("abc", 20), choice(json(running.get())).get("text"));
            slow.refuseAsClosed = true;
            r = c.post("/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}");
            assertEquals(503, r.statusCode(), r.body());
        }
    }

    /** Waits up to 5 s for a count to reach a value. */
    static void awaitAtLeast(IntSupplier count, int value) throws InterruptedException {
        long deadline = System.nanoTime() + 5_000_000_000L;
        while (count.getAsInt() < value && System.nanoTime() < deadline) {
            Thread.sleep(10);
        }
        assertTrue(count.getAsInt() >= value, "expected at least " + value + ", got " + count.getAsInt());
    }
}
