package io.mcore4j.samples.preprocess;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.data.indexed.IndexedDatasetReader;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import picocli.CommandLine;

/** The preprocess command line: help, errors and exit codes, a run, and the flag list of docs/cli.md. */
class PreprocessDataTest {
    @TempDir
    Path dir;

    private record Output(int code, String out, String err) {}

    private static Output run(String... argv) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        int code = PreprocessData.execute(argv, new PrintStream(out, true, StandardCharsets.UTF_8),
                new PrintStream(err, true, StandardCharsets.UTF_8));
        return new Output(code, out.toString(StandardCharsets.UTF_8), err.toString(StandardCharsets.UTF_8));
    }

    /** Exit code 2, one line that names {@code what} and where the flags are listed, and no stack trace. */
    private static void assertBadFlag(Output o, String what) {
        assertEquals(2, o.code, o.err);
        String[] lines = o.err.split("\n");
        assertEquals(1, lines.length, o.err);
        assertTrue(lines[0].startsWith("preprocess: ") && lines[0].contains(what), lines[0]);
        assertTrue(lines[0].endsWith(" ('preprocess --help' lists the flags)"), lines[0]);
        assertEquals("", o.out);
    }

    @Test
    void helpListsTheFlags() {
        Output o = run("--help");
        assertEquals(0, o.code);
        for (String flag : List.of("--input", "--output-prefix", "--tokenizer-type", "--tokenizer-model", "--eod-token",
                "--json-keys", "--append-eod", "--workers", "--on-bad-line", "--batch-lines", "--no-progress")) {
            assertTrue(o.out.contains(flag), flag + " missing from --help:\n" + o.out);
        }
    }

    @Test
    void badFlagsAndValuesExitWithTwoAndOneLine() {
        String[] required = {"--input", "a.jsonl", "--output-prefix", "b", "--tokenizer-type", "ByteLevel"};
        assertBadFlag(run(concat(required, "--bogus")), "--bogus");
        assertBadFlag(run(concat(required, "--workers", "many")), "many");
        assertBadFlag(run(concat(required, "--workers", "0")), "--workers 0 must be at least 1");
        assertBadFlag(run(concat(required, "--on-bad-line", "ignore")), "--on-bad-line ignore");
        assertBadFlag(run("--input", "a.jsonl", "--output-prefix", "b", "--tokenizer-type", "Sentencepiece"), "Sentencepiece");
        assertBadFlag(run("--input", "a.jsonl", "--output-prefix", "b", "--tokenizer-type", "HuggingFaceTokenizer"),
                "needs --tokenizer-model");
        assertBadFlag(run("--input", "a.jsonl"), "--output-prefix");
    }

    /** Issue 40, item 7: a missing input or output directory was exit 1 with a bare path ("preprocess: a.jsonl"). */
    @Test
    void missingInputsAndOutputDirectoriesNameTheirFlags() throws IOException {
        Path missing = dir.resolve("missing.jsonl");
        assertBadFlag(run("--input", missing.toString(), "--output-prefix", dir.resolve("b").toString(), "--tokenizer-type",
                "ByteLevel"), "--input " + missing + " does not exist");
        Path input = Files.writeString(dir.resolve("in.jsonl"), "{\"text\": \"ab\"}\n", StandardCharsets.UTF_8);
        Path noDir = dir.resolve("no-such-dir");
        assertBadFlag(run("--input", input.toString(), "--output-prefix", noDir.resolve("b").toString(), "--tokenizer-type",
                "ByteLevel"), "--output-prefix " + noDir.resolve("b") + ": " + noDir + " does not exist");
        Path tokenizer = dir.resolve("no-tokenizer.json");
        assertBadFlag(run("--input", input.toString(), "--output-prefix", dir.resolve("b").toString(), "--tokenizer-type",
                "HuggingFaceTokenizer", "--tokenizer-model", tokenizer.toString()), "--tokenizer-model " + tokenizer + " does not exist");
    }

    @Test
    void runsAndReportsOneLineOrFailsWithOne() throws IOException {
        Path input = dir.resolve("p.jsonl");
        Files.write(input, List.of("{\"text\": \"ab\", \"title\": \"T\"}", "{\"title\": \"U\", \"text\": \"\"}"), StandardCharsets.UTF_8);
        Output o = run("--input", input.toString(), "--output-prefix", dir.resolve("p").toString(), "--tokenizer-type",
                "ByteLevel", "--json-keys", "text", "title", "--append-eod", "--workers", "2");
        assertEquals(0, o.code, o.err);
        // not a terminal (System.console() is null under the test runner): the result line, no progress bar
        assertTrue(o.out.startsWith("preprocess: 2 documents (0 lines skipped), 7 tokens") && o.out.contains("MB/s"), o.out);
        assertFalse(o.err.contains("\r"), o.err);
        try (IndexedDatasetReader text = IndexedDatasetReader.open(dir.resolve("p_text_document"));
             IndexedDatasetReader title = IndexedDatasetReader.open(dir.resolve("p_title_document"))) {
            assertEquals(2, text.documentCount());
            assertEquals(2, title.documentCount());
        }

        Files.writeString(input, "{\"text\": \"ok\"}\n{\"text\": 5}\n", StandardCharsets.UTF_8);
        Output failed = run("--input", input.toString(), "--output-prefix", dir.resolve("f").toString(), "--tokenizer-type", "ByteLevel");
        assertEquals(1, failed.code);
        assertEquals(1, failed.err.split("\n").length, failed.err);
        assertTrue(failed.err.contains("line 2: field \"text\" is not a string"), failed.err);
    }

    @Test
    void theReadmeListsEveryFlagAndNoOther() throws IOException {
        String text = Files.readString(Path.of("..", "docs", "cli.md"));
        int start = text.indexOf("<!-- preprocess flags:");
        int end = text.indexOf("<!-- end of preprocess flags -->");
        assertTrue(start >= 0 && end > start, "docs/cli.md has no preprocess flag list");
        Set<String> listed = new TreeSet<>();
        Matcher m = Pattern.compile("`(--[a-z0-9_-]+)").matcher(text.substring(start, end));
        while (m.find()) {
            listed.add(m.group(1));
        }
        Set<String> options = new TreeSet<>();
        new CommandLine(new PreprocessData()).getCommandSpec().options().forEach(o -> options.add(o.longestName()));
        assertEquals(options, listed, "docs/cli.md's preprocess flag list");
    }

    private static String[] concat(String[] a, String... b) {
        String[] all = java.util.Arrays.copyOf(a, a.length + b.length);
        System.arraycopy(b, 0, all, a.length, b.length);
        return all;
    }
}
