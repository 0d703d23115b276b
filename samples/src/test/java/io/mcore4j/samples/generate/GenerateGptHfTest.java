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
 * {@code generate-gpt --load-hf}: hf-bridge's tiny fixtures, prompted with their fixture prompt (ids below 100, so
 * the byte-level tokenizer's bytes are the fixture's ids), complete greedily with the 20 tokens transformers' greedy
 * {@code generate()} gave: Qwen3 (QK-norm, 16 channels per head at hidden 32 and 4 heads) at TP1, TP2 and PP2,
 * Mistral with a 4-token sliding window at TP2, Gemma 3 (windows interleaved with global layers, its norms, GeGLU)
 * at PP2, Qwen3-MoE (8 experts, top-2, a dense layer among expert layers) at TP1 and PP2, DeepSeek-V3 (multi-latent
 * attention with YaRN, a dense layer, then experts with a shared one and a grouped sigmoid router) at PP2 (the Generator
 * at every layout
 * is HfGenerationTest's).
 */
class GenerateGptHfTest {
    private static final Path FIXTURES = Path.of("..", "hf-bridge", "src", "test", "resources", "hf");
    private static final Path QWEN3 = FIXTURES.resolve("qwen3");

    @ParameterizedTest(name = "{0} at TP{1} x PP{2}")
    @CsvSource({"qwen3, 1, 1, Qwen3ForCausalLM", "qwen3, 2, 1, Qwen3ForCausalLM", "qwen3, 1, 2, Qwen3ForCausalLM",
        "mistral, 2, 1, MistralForCausalLM", "gemma3, 1, 2, Gemma3ForCausalLM", "qwen3_moe, 1, 1, Qwen3MoeForCausalLM",
        "qwen3_moe, 1, 2, Qwen3MoeForCausalLM", "deepseek_v3, 1, 2, DeepseekV3ForCausalLM"})
    void completesAsTransformersDoes(String fixture, String tp, String pp, String className) throws Exception {
        Path dir = FIXTURES.resolve(fixture);
        String text = generate(dir, "--load-hf", dir.toString(), "--tensor-model-parallel-size", tp,
                "--pipeline-model-parallel-size", pp);
        assertTrue(text.contains(className), text);
        assertCompletion(dir, text, fixture + " at TP" + tp + " x PP" + pp);
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
        String text = generate(QWEN3, "--load", converted.toString(), "--num-attention-heads", "4", "--rotary-base", "1000000",
                "--norm-epsilon", "1e-5", "--seq-length", "256");
        assertCompletion(QWEN3, text, "converted");
    }

    /**
     * convert-hf's checkpoint of the Gemma 3 fixture, at PP2, completed by {@code generate-gpt --load} at TP2: what no
     * shape records (the windows, the zero-centred norms, the scales, the rotary bases) comes from the Hugging Face
     * config convert-hf stored.
     */
    @Test
    void convertedGemma3CompletesAsTransformersDoes(@TempDir Path dir) throws Exception {
        Path gemma = FIXTURES.resolve("gemma3");
        Path converted = dir.resolve("gemma3");
        assertEquals(0, new picocli.CommandLine(new io.mcore4j.samples.hf.ConvertHf()).execute("--load-hf",
                gemma.toString(), "--save", converted.toString(), "--nproc", "2", "--pipeline-model-parallel-size", "2",
                "--make-vocab-size-divisible-by", "8"));
        String text = generate(gemma, "--load", converted.toString(), "--tensor-model-parallel-size", "2");
        assertTrue(text.contains("Gemma3ForCausalLM"), text);
        assertCompletion(gemma, text, "converted gemma3");
    }

    private static String generate(Path fixture, String... flags) throws Exception {
        JsonObject reference = reference(fixture);
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

    private static JsonObject reference(Path fixture) throws Exception {
        return JsonParser.parseString(Files.readString(fixture.resolve("logits.json"), StandardCharsets.UTF_8)).getAsJsonObject();
    }

    private static void assertCompletion(Path fixture, String text, String what) throws Exception {
        JsonArray generated = reference(fixture).getAsJsonArray("generated");
        int[] expected = new int[generated.size()];
        for (int i = 0; i < expected.length; i++) {
            expected[i] = generated.get(i).getAsInt();
        }
        String line = "completion 0 (" + expected.length + " tokens, ";
        int at = text.indexOf(line);
        assertTrue(at >= 0, text);
        String completion = text.substring(text.indexOf("): ", at) + 3).stripTrailing();
        // the console line's trailing whitespace is cut on both sides (DeepSeek's fixture ends in a form feed, id 12)
        assertEquals(new ByteLevelTokenizer().decode(expected).stripTrailing(), completion, what);
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
