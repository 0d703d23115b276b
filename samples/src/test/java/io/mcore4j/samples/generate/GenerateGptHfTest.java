package io.mcore4j.samples.generate;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonArray;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import io.mcore4j.data.tokenizer.ByteLevelTokenizer;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * {@code generate-gpt --load-hf}: hf-bridge's tiny Qwen3 fixture (QK-norm, 16 channels per head at
 * hidden 32 and 4 heads), prompted with its fixture prompt (ids below 100, so the byte-level
 * tokenizer's bytes are the fixture's ids), completes greedily at TP1, TP2 and PP2 with the 20
 * tokens transformers' greedy {@code generate()} gave.
 */
class GenerateGptHfTest {
    private static final Path QWEN3 = Path.of("..", "hf-bridge", "src", "test", "resources", "hf", "qwen3");

    @ParameterizedTest(name = "TP{0} x PP{1}")
    @CsvSource({"1, 1", "2, 1", "1, 2"})
    void qwen3CompletesAsTransformersDoes(String tp, String pp) throws Exception {
        String text = generate("--load-hf", QWEN3.toString(), "--tensor-model-parallel-size", tp,
                "--pipeline-model-parallel-size", pp);
        assertTrue(text.contains("Qwen3ForCausalLM"), text);
        assertCompletion(text, "TP" + tp + " x PP" + pp);
    }

    /**
     * convert-hf's checkpoint of the same model, at TP2, completed by {@code generate-gpt --load} at TP1:
     * the head width comes from the query norm's shape, the rest from the flags.
     */
    @Test
    void convertedQwen3CompletesAsTransformersDoes(@TempDir Path dir) throws Exception {
        Path converted = dir.resolve("qwen3");
        assertEquals(0, new picocli.CommandLine(new io.mcore4j.samples.hf.ConvertHf()).execute("--load-hf",
                QWEN3.toString(), "--save", converted.toString(), "--nproc", "2", "--tensor-model-parallel-size", "2",
                "--make-vocab-size-divisible-by", "8"));
        String text = generate("--load", converted.toString(), "--num-attention-heads", "4", "--rotary-base", "1000000",
                "--norm-epsilon", "1e-5", "--seq-length", "256");
        assertCompletion(text, "converted");
    }

    private static String generate(String... flags) throws Exception {
        JsonObject reference = reference();
        String prompt = bytesOf(reference.getAsJsonArray("input_ids"));
        int tokens = reference.getAsJsonArray("generated").size();
        java.util.List<String> argv = new java.util.ArrayList<>(java.util.List.of(flags));
        argv.addAll(java.util.List.of("--prompts", prompt, "--greedy", "--num-tokens-to-generate", String.valueOf(tokens)));
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        PrintStream out = new PrintStream(bytes, true, StandardCharsets.UTF_8);
        int code = GenerateGpt.run(out, out, argv.toArray(String[]::new));
        String text = bytes.toString(StandardCharsets.UTF_8);
        assertEquals(0, code, text);
        return text;
    }

    private static JsonObject reference() throws Exception {
        return JsonParser.parseString(Files.readString(QWEN3.resolve("logits.json"), StandardCharsets.UTF_8)).getAsJsonObject();
    }

    private static void assertCompletion(String text, String what) throws Exception {
        JsonArray generated = reference().getAsJsonArray("generated");
        int[] expected = new int[generated.size()];
        for (int i = 0; i < expected.length; i++) {
            expected[i] = generated.get(i).getAsInt();
        }
        String line = "completion 0 (" + expected.length + " tokens, ";
        int at = text.indexOf(line);
        assertTrue(at >= 0, text);
        String completion = text.substring(text.indexOf("): ", at) + 3).stripTrailing();
        assertEquals(new ByteLevelTokenizer().decode(expected), completion, what);
    }

    @Test
    void loadAndLoadHfAreAlternatives() {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        PrintStream out = new PrintStream(bytes, true, StandardCharsets.UTF_8);
        assertEquals(2, GenerateGpt.run(out, out, "--load", QWEN3.toString(), "--load-hf", QWEN3.toString(), "--prompts", "x"));
        assertTrue(bytes.toString(StandardCharsets.UTF_8).contains("--load-hf"), bytes.toString(StandardCharsets.UTF_8));
    }

    private static String bytesOf(JsonArray ids) {
        byte[] b = new byte[ids.size()];
        for (int i = 0; i < b.length; i++) {
            b[i] = (byte) ids.get(i).getAsInt();
        }
        return new String(b, StandardCharsets.US_ASCII);
    }
}
