package io.mcore4j.samples.hf;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.samples.cli.Mcore4jCli;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Issue 37: every command that reads a Hugging Face directory ({@code pretrain-gpt --load-hf},
 * {@code generate-gpt --load-hf}, {@code convert-hf}, {@code export-hf --hf-config}) refuses an
 * unsupported architecture, a missing directory and a directory whose tensors do not match its config
 * with exit code 2 and one line naming the flag, the directory and what was expected; so do
 * {@code convert-hf} and {@code export-hf} for a layout that needs more ranks than {@code --nproc}, and
 * {@code export-hf} for a {@code --load} that holds no checkpoint. Before, the architecture and tensor
 * failures ended in exit 1 (a failed run) and the layout in "tensor parallel size 2 does not divide
 * world size 1", naming no flag. All run through {@link Mcore4jCli}, as {@code bin/mcore4j} does.
 */
class HfBridgeCommandLineErrorsTest {
    private static final Path LLAMA = Path.of("..", "hf-bridge", "src", "test", "resources", "hf", "llama");

    @TempDir
    static Path dir;
    /** The LLaMA fixture's config with an architecture mcore4j does not map, and its tensors. */
    private static Path bert;
    /** The LLaMA fixture's config with the (tied) Qwen2 fixture's tensors: LLaMA's untied head is missing. */
    private static Path wrongWeights;
    private static Path missing;

    @BeforeAll
    static void directories() throws IOException {
        bert = Files.createDirectories(dir.resolve("bert"));
        Files.writeString(bert.resolve("config.json"), Files.readString(LLAMA.resolve("config.json"))
                .replace("LlamaForCausalLM", "BertForMaskedLM"));
        Files.copy(LLAMA.resolve("model.safetensors"), bert.resolve("model.safetensors"));
        wrongWeights = Files.createDirectories(dir.resolve("wrong-weights"));
        Files.copy(LLAMA.resolve("config.json"), wrongWeights.resolve("config.json"));
        Files.copy(LLAMA.resolveSibling("qwen2").resolve("model.safetensors"), wrongWeights.resolve("model.safetensors"));
        missing = dir.resolve("missing");
    }

    /** Runs {@code mcore4j argv}; asserts exit 2 and one line on stderr starting with the command and holding each of {@code expected}. */
    private static void refused(List<String> expected, String... argv) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        int code = Mcore4jCli.execute(argv, new PrintStream(out, true, StandardCharsets.UTF_8),
                new PrintStream(err, true, StandardCharsets.UTF_8));
        String text = err.toString(StandardCharsets.UTF_8);
        assertEquals(2, code, List.of(argv) + ": " + text);
        assertEquals(1, text.lines().count(), "one line, no stack trace: " + text);
        assertTrue(text.startsWith(argv[0] + ": "), text);
        for (String e : expected) {
            assertTrue(text.contains(e), List.of(argv) + "\n expected: " + e + "\n got: " + text);
        }
        assertFalse(out.toString(StandardCharsets.UTF_8).contains("training:"), "refused before training: " + out);
    }

    private static final String UNSUPPORTED = "architecture \"BertForMaskedLM\" is not supported; supported: LlamaForCausalLM";
    private static final String EXPECTED_DIRECTORY = "does not exist; expected a Hugging Face checkpoint directory";
    private static final String NO_TENSOR = "tensor \"lm_head.weight\" that LlamaForCausalLM needs is in no file of the checkpoint";

    @Test
    void pretrainGptLoadHf() {
        String[] train = {"--mock-data", "--train-iters", "1", "--micro-batch-size", "1", "--global-batch-size", "1",
                "--seq-length", "8"};
        refused(List.of("--load-hf " + bert + ": ", UNSUPPORTED), cat(List.of("pretrain-gpt", "--load-hf", bert.toString()), train));
        refused(List.of("--load-hf " + missing + " " + EXPECTED_DIRECTORY),
                cat(List.of("pretrain-gpt", "--load-hf", missing.toString()), train));
        refused(List.of("--load-hf " + wrongWeights + ": ", NO_TENSOR),
                cat(List.of("pretrain-gpt", "--load-hf", wrongWeights.toString()), train));
    }

    @Test
    void generateGptLoadHf() {
        refused(List.of("--load-hf " + bert + ": ", UNSUPPORTED), "generate-gpt", "--load-hf", bert.toString(), "--prompts", "a");
        refused(List.of("--load-hf " + missing + " " + EXPECTED_DIRECTORY), "generate-gpt", "--load-hf", missing.toString(),
                "--prompts", "a");
        refused(List.of("--load-hf " + wrongWeights + ": ", NO_TENSOR), "generate-gpt", "--load-hf", wrongWeights.toString(),
                "--prompts", "a");
    }

    @Test
    void convertHf() {
        String out = dir.resolve("converted").toString();
        refused(List.of("--load-hf " + bert + ": ", UNSUPPORTED), "convert-hf", "--load-hf", bert.toString(), "--save", out);
        refused(List.of("--load-hf " + missing + " " + EXPECTED_DIRECTORY), "convert-hf", "--load-hf", missing.toString(),
                "--save", out);
        refused(List.of("--load-hf " + wrongWeights + ": ", NO_TENSOR), "convert-hf", "--load-hf", wrongWeights.toString(),
                "--save", out);
        refused(List.of("--tensor-model-parallel-size 2 x --pipeline-model-parallel-size 1 need a multiple of 2 ranks,"
                + " but --nproc is 1; expected --nproc 2"), "convert-hf", "--load-hf", LLAMA.toString(), "--save", out,
                "--tensor-model-parallel-size", "2");
        assertFalse(Files.exists(Path.of(out)), "nothing written");
    }

    @Test
    void exportHf() throws IOException {
        Path empty = Files.createDirectories(dir.resolve("not-a-checkpoint"));
        String out = dir.resolve("exported").toString();
        refused(List.of("--load " + empty + " holds no complete checkpoint (no mcore4j_metadata.json); expected a"
                + " convert-hf or pretrain-gpt --save directory"), "export-hf", "--load", empty.toString(), "--save-hf", out);
        refused(List.of("--hf-config " + bert + ": ", UNSUPPORTED), "export-hf", "--load", empty.toString(), "--save-hf", out,
                "--hf-config", bert.toString());
        refused(List.of("--tensor-model-parallel-size 2 x --pipeline-model-parallel-size 2 need a multiple of 4 ranks,"
                + " but --nproc is 2; expected --nproc 4"), "export-hf", "--load", empty.toString(), "--save-hf", out,
                "--hf-config", LLAMA.toString(), "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2",
                "--nproc", "2");
    }

    private static String[] cat(List<String> head, String... tail) {
        return java.util.stream.Stream.concat(head.stream(), java.util.Arrays.stream(tail)).toArray(String[]::new);
    }
}
