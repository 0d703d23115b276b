package io.mcore4j.samples.generate;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Reliability (issue 40, item 7, the front-ends that share pretrain-gpt's inputs): generate-gpt's bad
 * paths and values end in exit 2 and one line naming the flag. Before, picocli printed the stack
 * trace of whatever the loader threw, with exit 1, and a NaN temperature or a top_p of 2 reached the
 * sampler.
 */
class GenerateGptInputsReliabilityTest {
    @TempDir
    Path dir;

    private static void refused(String expected, String... argv) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        int code = GenerateGpt.run(new PrintStream(out, true, StandardCharsets.UTF_8), new PrintStream(err, true, StandardCharsets.UTF_8),
                argv);
        String text = err.toString(StandardCharsets.UTF_8);
        assertEquals(2, code, List.of(argv) + ": " + text);
        assertTrue(text.startsWith("generate-gpt: ") && text.lines().findFirst().orElse("").contains(expected),
                List.of(argv) + "\n expected: " + expected + "\n got: " + text);
        assertEquals(1, text.lines().count(), "one line, no stack trace: " + text);
        assertFalse(out.toString(StandardCharsets.UTF_8).contains("completion"), out.toString(StandardCharsets.UTF_8));
    }

    @Test
    void missingCheckpointAndTokenizerNameTheirFlags() throws IOException {
        Path none = dir.resolve("no-checkpoint");
        refused("--load " + none + " does not exist", "--load", none.toString(), "--prompts", "x");
        Path file = Files.writeString(dir.resolve("a-file"), "x");
        refused("--load " + file + " is a file", "--load", file.toString(), "--prompts", "x");
        Path empty = Files.createDirectories(dir.resolve("empty"));
        Path tokenizer = dir.resolve("no-tokenizer.json");
        refused("--tokenizer-model " + tokenizer + " does not exist", "--load", empty.toString(), "--prompts", "x",
                "--tokenizer-model", tokenizer.toString());
    }

    @Test
    void outOfRangeSamplingValuesNameTheFlag() throws IOException {
        Path empty = Files.createDirectories(dir.resolve("empty"));
        String[][] cases = {
            {"--temperature", "NaN"}, {"--temperature", "0"}, {"--top_p", "2"}, {"--top_k", "-1"},
            {"--num-tokens-to-generate", "0"}, {"--num-attention-heads", "0"}, {"--seq-length", "-5"},
            {"--tensor-model-parallel-size", "0"}, {"--distributed-timeout-seconds", "0"}, {"--norm-epsilon", "-1"},
        };
        for (String[] c : cases) {
            List<String> argv = new ArrayList<>(List.of("--load", empty.toString(), "--prompts", "x"));
            argv.addAll(List.of(c));
            refused(c[0] + " ", argv.toArray(String[]::new));
        }
    }
}
