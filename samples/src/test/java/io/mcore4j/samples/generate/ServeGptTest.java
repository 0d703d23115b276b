package io.mcore4j.samples.generate;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.samples.cli.Mcore4jCli;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;

import com.google.gson.JsonObject;
import com.google.gson.JsonParser;

import org.junit.jupiter.api.Test;

/**
 * {@code serve-gpt} on the tiny Llama of data's chat fixtures (a Hugging Face directory with its tokenizer and chat
 * template): it starts on a free port, answers a chat request under its served name, answers concurrent requests on
 * the continuous engine as the serial engine answers each alone, and refuses what it cannot do, naming the flag.
 */
class ServeGptTest {
    private static final Path LLAMA = Path.of("..", "data", "src", "test", "resources", "io", "mcore4j", "data", "chat", "llama");

    @Test
    void servesAHuggingFaceDirectoryWithItsTokenizerAndChatTemplate() throws Exception {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        try (ServeGpt.Serving serving = ServeGpt.start(new PrintStream(out, true, StandardCharsets.UTF_8), "--load-hf",
                LLAMA.toString(), "--host", "127.0.0.1", "--port", "0", "--served-model-name", "tiny", "--max-queue", "4")) {
            String line = out.toString(StandardCharsets.UTF_8);
            assertTrue(line.startsWith("serve-gpt: ") && line.contains("serving \"tiny\" at http://127.0.0.1:"
                    + serving.port() + "/v1"), line);
            HttpResponse<String> r = HttpClient.newHttpClient().send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:"
                    + serving.port() + "/v1/chat/completions")).POST(HttpRequest.BodyPublishers.ofString("{\"model\": \"tiny\","
                    + " \"max_tokens\": 5, \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}")).build(),
                    HttpResponse.BodyHandlers.ofString());
            assertEquals(200, r.statusCode(), r.body());
            assertTrue(r.body().contains("\"object\":\"chat.completion\"") && r.body().contains("\"model\":\"tiny\""), r.body());
        }
    }

    /**
     * The continuous engine (the default), with four requests in flight at once, answers each as the serial engine
     * answers it alone: greedy, seeded sampling with min-p, and greedy under the three penalties.
     */
    @Test
    void theContinuousEngineAnswersConcurrentRequestsAsTheSerialOneDoesAlone() throws Exception {
        List<String> bodies = List.of(
                "{\"prompt\": \"Hello\", \"max_tokens\": 12, \"temperature\": 0}",
                "{\"prompt\": \"The cat\", \"max_tokens\": 12, \"temperature\": 0.8, \"top_p\": 0.9, \"min_p\": 0.05,"
                        + " \"seed\": 7}",
                "{\"prompt\": \"Once\", \"max_tokens\": 12, \"temperature\": 0, \"repetition_penalty\": 1.3,"
                        + " \"presence_penalty\": 0.5, \"frequency_penalty\": 0.4}",
                "{\"prompt\": [5, 9, 13], \"max_tokens\": 7, \"temperature\": 0, \"stop_token_ids\": [2]}");
        List<String> alone = new ArrayList<>();
        try (ServeGpt.Serving serving = ServeGpt.start(new PrintStream(new ByteArrayOutputStream(), true,
                StandardCharsets.UTF_8), "--load-hf", LLAMA.toString(), "--host", "127.0.0.1", "--port", "0", "--engine",
                "serial")) {
            for (String body : bodies) {
                alone.add(text(completion(serving.port(), body).join()));
            }
        }
        try (ServeGpt.Serving serving = ServeGpt.start(new PrintStream(new ByteArrayOutputStream(), true,
                StandardCharsets.UTF_8), "--load-hf", LLAMA.toString(), "--host", "127.0.0.1", "--port", "0",
                "--max-num-seqs", "4")) {
            List<CompletableFuture<HttpResponse<String>>> inFlight = new ArrayList<>();
            for (String body : bodies) {
                inFlight.add(completion(serving.port(), body));
            }
            for (int i = 0; i < bodies.size(); i++) {
                assertEquals(alone.get(i), text(inFlight.get(i).join()), bodies.get(i));
            }
        }
    }

    private static CompletableFuture<HttpResponse<String>> completion(int port, String body) {
        return HttpClient.newHttpClient().sendAsync(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port
                + "/v1/completions")).POST(HttpRequest.BodyPublishers.ofString(body)).build(),
                HttpResponse.BodyHandlers.ofString());
    }

    /** The answer's text and finish reason, after checking it is a 200. */
    private static String text(HttpResponse<String> r) {
        assertEquals(200, r.statusCode(), r.body());
        JsonObject choice = JsonParser.parseString(r.body()).getAsJsonObject().getAsJsonArray("choices").get(0)
                .getAsJsonObject();
        return choice.get("text").getAsString() + " | " + choice.get("finish_reason").getAsString();
    }

    @Test
    void refusesWhatItCannotDo() {
        IllegalArgumentException tp = assertThrows(IllegalArgumentException.class, () -> ServeGpt.start(System.out,
                "--load-hf", LLAMA.toString(), "--tensor-model-parallel-size", "2"));
        assertTrue(tp.getMessage().startsWith("--tensor-model-parallel-size 2"), tp.getMessage());
        IllegalArgumentException seqs = assertThrows(IllegalArgumentException.class, () -> ServeGpt.start(System.out,
                "--load-hf", LLAMA.toString(), "--port", "0", "--engine", "serial", "--max-num-seqs", "8"));
        assertTrue(seqs.getMessage().startsWith("--max-num-seqs 8"), seqs.getMessage());
        IllegalArgumentException port = assertThrows(IllegalArgumentException.class, () -> ServeGpt.start(System.out,
                "--load-hf", LLAMA.toString(), "--port", "70000"));
        assertTrue(port.getMessage().contains("70000"), port.getMessage());
    }

    @Test
    void isACommandOfTheDistribution() {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        assertEquals(0, Mcore4jCli.execute(new String[] {"serve-gpt", "--help"}, new PrintStream(out, true, StandardCharsets.UTF_8),
                new PrintStream(err, true, StandardCharsets.UTF_8)));
        String help = out.toString(StandardCharsets.UTF_8);
        for (String flag : new String[] {"--load-hf", "--port", "--served-model-name", "--max-queue", "--max-num-seqs",
            "--chat-template", "--tensor-model-parallel-size"}) {
            assertTrue(help.contains(flag), flag + " missing from:\n" + help);
        }
        assertEquals(2, Mcore4jCli.execute(new String[] {"serve-gpt", "--port", "x"}, new PrintStream(out, true,
                StandardCharsets.UTF_8), new PrintStream(err, true, StandardCharsets.UTF_8)));
    }
}
