package io.mcore4j.samples.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.Gson;
import com.google.gson.JsonParser;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

import org.junit.jupiter.api.Test;

/**
 * Issue 37's acceptance: the README's Hugging Face section is {@link HfFineTuneExample} as it is
 * (imports and all), and that program, run on hf-bridge's tiny LLaMA fixture (the directory the README
 * command names), gives transformers' logits for the fixture's prompt at TP1 and TP2, and fine-tunes
 * at TP2 with the losses of TP1, which fall.
 */
class HfFineTuneExampleTest {
    private static final Path ROOT = Path.of("..");
    private static final Path LLAMA = ROOT.resolve("hf-bridge/src/test/resources/hf/llama");
    private static final String FROM = "// ---- the README's Hugging Face example: from here ----\n";
    private static final String TO = "// ---- to here ----\n";

    @Test
    void theReadmeShowsTheExampleWhole() throws IOException {
        String source = Files.readString(ROOT.resolve("samples/src/main/java/io/mcore4j/samples/examples/HfFineTuneExample.java"));
        String program = source.substring(source.indexOf(FROM) + FROM.length(), source.indexOf(TO));
        String readme = Files.readString(ROOT.resolve("README.md"));
        assertTrue(readme.contains("```java\n" + program + "```\n"),
                "README.md's Hugging Face section must show HfFineTuneExample.java between its markers, unchanged");
        assertTrue(readme.contains("io.mcore4j.samples.examples.HfFineTuneExample hf-bridge/src/test/resources/hf/llama"),
                "README.md names the command that runs it on the fixture");
    }

    @Test
    void logitsAreTransformersAndTp2FineTunesAsTp1() throws IOException {
        float[][] expected = new Gson().fromJson(JsonParser.parseString(Files.readString(LLAMA.resolve("logits.json"),
                StandardCharsets.UTF_8)).getAsJsonObject().get("logits"), float[][].class);
        HfFineTuneExample.Result tp1 = HfFineTuneExample.run(LLAMA, 1);
        HfFineTuneExample.Result tp2 = HfFineTuneExample.run(LLAMA, 2);
        for (HfFineTuneExample.Result r : List.of(tp1, tp2)) {
            assertEquals(1, r.logits().length);
            assertEquals(expected.length, r.logits()[0].length, "positions");
            double worst = 0;
            for (int s = 0; s < expected.length; s++) {
                assertEquals(expected[s].length, r.logits()[0][s].length, "the vocabulary without its padding");
                for (int v = 0; v < expected[s].length; v++) {
                    worst = Math.max(worst, Math.abs(r.logits()[0][s][v] - expected[s][v]));
                }
            }
            System.out.printf("logits differ from transformers' by at most %.3g%n", worst);
            assertTrue(worst <= 1e-5, "logits differ from transformers' by " + worst);
        }
        System.out.println("TP1 losses " + tp1.losses() + "\nTP2 losses " + tp2.losses());
        assertEquals(8, tp1.losses().size());
        for (int i = 0; i < tp1.losses().size(); i++) {
            double a = tp1.losses().get(i);
            double b = tp2.losses().get(i);
            assertTrue(Math.abs(a - b) <= 1e-5 * Math.abs(a), "iteration " + (i + 1) + ": TP2 " + b + ", TP1 " + a);
        }
        assertTrue(tp1.losses().get(7) < tp1.losses().get(0) - 0.5, "the loss falls: " + tp1.losses());
    }
}
