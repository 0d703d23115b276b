package io.mcore4j.server;

import io.mcore4j.data.preprocess.StrictJson;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Java's {@link HttpClient} against a server on this machine, with what the tests read from answers. */
final class OpenAiClient {
    final HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();
    private final int port;

    OpenAiClient(int port) {
        this.port = port;
    }

    URI uri(String path) {
        return URI.create("http://127.0.0.1:" + port + path);
    }

    HttpRequest request(String path, String json) {
        return HttpRequest.newBuilder(uri(path)).timeout(Duration.ofSeconds(30))
                .header("Content-Type", "application/json").POST(HttpRequest.BodyPublishers.ofString(json)).build();
    }

    HttpResponse<String> post(String path, String json) throws IOException, InterruptedException {
        return http.send(request(path, json), HttpResponse.BodyHandlers.ofString());
    }

    HttpResponse<String> get(String path) throws IOException, InterruptedException {
        return http.send(HttpRequest.newBuilder(uri(path)).timeout(Duration.ofSeconds(30)).GET().build(),
                HttpResponse.BodyHandlers.ofString());
    }

    /** The JSON object of an answer. */
    @SuppressWarnings("unchecked")
    static Map<String, Object> json(HttpResponse<String> response) {
        return (Map<String, Object>) StrictJson.parseKeepingIntegers(response.body());
    }

    /**
     * The events of a server-sent stream, checked to be {@code data:} lines ending with {@code [DONE]}.
     *
     * @return the JSON chunks before {@code [DONE]}
     */
    @SuppressWarnings("unchecked")
    static List<Map<String, Object>> events(HttpResponse<String> response) {
        assertEquals(200, response.statusCode(), response.body());
        assertTrue(response.headers().firstValue("content-type").orElse("").startsWith("text/event-stream"),
                response.headers().toString());
        String[] blocks = response.body().split("\n\n", -1);
        assertEquals("", blocks[blocks.length - 1], "the stream ends with a blank line");
        assertEquals("data: [DONE]", blocks[blocks.length - 2], "the stream ends with [DONE]");
        List<Map<String, Object>> out = new ArrayList<>();
        for (int k = 0; k < blocks.length - 2; k++) {
            assertTrue(blocks[k].startsWith("data: "), "an event is a data line: " + blocks[k]);
            out.add((Map<String, Object>) StrictJson.parseKeepingIntegers(blocks[k].substring(6)));
        }
        return out;
    }

    /** The first choice of an answer or chunk. */
    @SuppressWarnings("unchecked")
    static Map<String, Object> choice(Map<String, Object> answer) {
        return ((List<Map<String, Object>>) answer.get("choices")).get(0);
    }

    /** The text of a stream: its completions' {@code text} or its chat deltas' {@code content}, concatenated. */
    @SuppressWarnings("unchecked")
    static String streamedText(List<Map<String, Object>> events) {
        StringBuilder text = new StringBuilder();
        for (Map<String, Object> e : events) {
            if (((List<?>) e.get("choices")).isEmpty()) {
                continue; // the usage chunk
            }
            Map<String, Object> c = choice(e);
            Object piece = c.containsKey("delta") ? ((Map<String, Object>) c.get("delta")).get("content") : c.get("text");
            text.append(piece == null ? "" : piece);
        }
        return text.toString();
    }

    /** The error object of an error answer. */
    @SuppressWarnings("unchecked")
    static Map<String, Object> error(HttpResponse<String> response) {
        return (Map<String, Object>) json(response).get("error");
    }
}
