package io.mcore4j.samples.hf;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import picocli.CommandLine;

/**
 * Reliability (issue 40, item 7, the front-ends that share pretrain-gpt's inputs): convert-hf and
 * export-hf name the flag of a missing or wrong directory in one line with exit 2 (a config.json that is
 * not JSON included, since issue 37); a failed run is one line with exit 1. Before, picocli printed the
 * stack trace of the loader's exception, exit 1.
 */
class HfCommandsInputsReliabilityTest {
    @TempDir
    Path dir;

    private static void refused(CommandLine command, String name, String expected, String... argv) {
        StringWriter err = new StringWriter();
        int code = command.setOut(new PrintWriter(new StringWriter())).setErr(new PrintWriter(err, true)).execute(argv);
        String text = err.toString();
        assertEquals(2, code, List.of(argv) + ": " + text);
        assertTrue(text.startsWith(name + ": ") && text.lines().findFirst().orElse("").contains(expected),
                List.of(argv) + "\n expected: " + expected + "\n got: " + text);
        assertEquals(1, text.lines().count(), "one line, no stack trace: " + text);
    }

    @Test
    void convertHfNamesAMissingOrIncompleteHuggingFaceDirectory() throws IOException {
        Path none = dir.resolve("no-hf");
        refused(ConvertHf.commandLine(), "convert-hf", "--load-hf " + none + " does not exist",
                "--load-hf", none.toString(), "--save", dir.resolve("out").toString());
        Path empty = Files.createDirectories(dir.resolve("empty"));
        refused(ConvertHf.commandLine(), "convert-hf", "--load-hf " + empty + " has no config.json",
                "--load-hf", empty.toString(), "--save", dir.resolve("out").toString());
        // a config.json that is not JSON is bad input too (issue 37: exit 2, as for every other bad input)
        Path bad = Files.createDirectories(dir.resolve("bad"));
        Files.writeString(bad.resolve("config.json"), "{\"model_type\": \"gpt2\"");
        refused(ConvertHf.commandLine(), "convert-hf", "--load-hf " + bad + ": " + bad.resolve("config.json") + " is not a JSON object",
                "--load-hf", bad.toString(), "--save", dir.resolve("out").toString());
    }

    @Test
    void exportHfNamesMissingDirectoriesAndBadSizes() throws IOException {
        Path none = dir.resolve("no-checkpoint");
        Path out = dir.resolve("out");
        refused(ExportHf.commandLine(), "export-hf", "--load " + none + " does not exist",
                "--load", none.toString(), "--save-hf", out.toString());
        Path empty = Files.createDirectories(dir.resolve("empty"));
        refused(ExportHf.commandLine(), "export-hf", "--hf-config " + none + " does not exist",
                "--load", empty.toString(), "--save-hf", out.toString(), "--hf-config", none.toString());
        refused(ExportHf.commandLine(), "export-hf", "--tokenizer-from " + none + " is not a directory",
                "--load", empty.toString(), "--save-hf", out.toString(), "--tokenizer-from", none.toString());
        refused(ExportHf.commandLine(), "export-hf", "--max-shard-bytes 0 must be at least 1",
                "--load", empty.toString(), "--save-hf", out.toString(), "--max-shard-bytes", "0");
    }
}
