package io.mcore4j.data.preprocess;

import io.mcore4j.data.indexed.DType;
import io.mcore4j.data.indexed.DatasetFiles;
import io.mcore4j.data.indexed.IndexedDatasetReader;
import io.mcore4j.data.tokenizer.ByteLevelTokenizer;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class PreprocessTest {
    @TempDir
    Path dir;

    /** Texts with escapes, non-ASCII, an empty one; the JSON lines are written by hand. */
    private static final String[] TEXTS = {"Call me Ishmael.", "", "caf\u00e9 \u4e2d\u6587 \uD83D\uDE00", "line\nbreak \"quoted\" \\"};
    private static final String[] LINES = {
        "{\"id\": 1, \"text\": \"Call me Ishmael.\"}",
        "{\"text\": \"\", \"meta\": {\"x\": [1, 2]}}",
        "{\"text\": \"caf\\u00e9 \u4e2d\u6587 \\ud83d\\ude00\"}",
        "{\"text\": \"line\\nbreak \\\"quoted\\\" \\\\\"}",
    };

    private Path jsonl(String name, int copies, String... extraLines) throws IOException {
        List<String> lines = new ArrayList<>();
        for (int c = 0; c < copies; c++) {
            lines.addAll(List.of(LINES));
        }
        lines.addAll(List.of(extraLines));
        Path file = dir.resolve(name);
        Files.write(file, lines, StandardCharsets.UTF_8);
        return file;
    }

    private static PreprocessResult run(String... args) throws IOException {
        return Preprocess.run(PreprocessOptions.parse(args), null);
    }

    @Test
    void byteLevelOutputHoldsTheTextsAndIsTheSameForOneAndFourWorkers() throws IOException {
        Path input = jsonl("corpus.jsonl", 50);
        PreprocessResult one = run("--input", input.toString(), "--output-prefix", dir.resolve("w1").toString(),
                "--tokenizer-type", "ByteLevel", "--append-eod", "--workers", "1", "--batch-lines", "7", "--no-progress");
        PreprocessResult four = run("--input", input.toString(), "--output-prefix", dir.resolve("w4").toString(),
                "--tokenizer-type", "ByteLevel", "--append-eod", "--workers", "4", "--batch-lines", "7", "--no-progress");
        assertEquals(200, one.documents());
        assertEquals(DType.UINT16, one.dtype());
        assertEquals(List.of(dir.resolve("w1_text_document")), one.outputs());
        for (String ext : List.of(".bin", ".idx")) {
            byte[] a = Files.readAllBytes(dir.resolve("w1_text_document" + ext));
            byte[] b = Files.readAllBytes(dir.resolve("w4_text_document" + ext));
            assertArrayEquals(a, b, ext + " differs between 1 and 4 workers");
        }
        long expectedTokens = 0;
        ByteLevelTokenizer tokenizer = new ByteLevelTokenizer();
        try (IndexedDatasetReader r = IndexedDatasetReader.open(dir.resolve("w4_text_document"))) {
            assertEquals(200, r.documentCount());
            assertEquals(150, r.sequenceCount()); // empty texts are documents without sequences
            int sequence = 0;
            for (int d = 0; d < 200; d++) {
                String text = TEXTS[d % 4];
                byte[] utf8 = text.getBytes(StandardCharsets.UTF_8);
                if (utf8.length == 0) {
                    assertEquals(0, r.documentLength(d));
                    continue;
                }
                int[] ids = r.sequence(sequence++).toIntArray();
                assertEquals(utf8.length + 1, ids.length);
                for (int k = 0; k < utf8.length; k++) {
                    assertEquals(utf8[k] & 0xFF, ids[k]);
                }
                assertEquals(ByteLevelTokenizer.END_OF_DOCUMENT, ids[ids.length - 1]);
                assertEquals(text, tokenizer.decode(ids));
                expectedTokens += ids.length;
            }
        }
        assertEquals(expectedTokens, four.tokens());
    }

    @Test
    void severalKeysGiveSeveralDatasets() throws IOException {
        Path input = dir.resolve("keys.jsonl");
        Files.writeString(input, "{\"title\": \"T1\", \"text\": \"ab\"}\n{\"text\": \"c\", \"title\": \"T2\"}", StandardCharsets.UTF_8);
        run("--input", input.toString(), "--output-prefix", dir.resolve("out").toString(), "--tokenizer-type", "ByteLevel",
                "--json-keys", "text", "title", "--no-progress");
        try (IndexedDatasetReader text = IndexedDatasetReader.open(dir.resolve("out_text_document"));
             IndexedDatasetReader title = IndexedDatasetReader.open(dir.resolve("out_title_document"))) {
            assertArrayEquals(new int[] {'a', 'b'}, text.sequence(0).toIntArray());
            assertArrayEquals(new int[] {'c'}, text.sequence(1).toIntArray());
            assertArrayEquals(new int[] {'T', '2'}, title.sequence(1).toIntArray());
        }
    }

    @Test
    void badLinesAreSkippedWithTheirNumbersOrStopTheRun() throws IOException {
        Path input = jsonl("bad.jsonl", 1, "{\"text\": \"ok\"", "", "{\"text\": 5}", "{\"text\": \"fine\"}");
        ByteArrayOutputStream console = new ByteArrayOutputStream();
        PreprocessResult r = Preprocess.run(PreprocessOptions.parse("--input", input.toString(), "--output-prefix",
                dir.resolve("skip").toString(), "--tokenizer-type", "ByteLevel", "--on-bad-line", "skip", "--no-progress"),
                new PrintStream(console, true, StandardCharsets.UTF_8));
        assertEquals(5, r.documents());
        assertEquals(2, r.skippedLines());
        assertEquals(1, r.blankLines());
        String report = console.toString(StandardCharsets.UTF_8);
        assertTrue(report.contains("bad.jsonl line 5: End of input at column 14 (skipped)"), report);
        assertTrue(report.contains("bad.jsonl line 7: field \"text\" is not a string but a number at column 11 (skipped)"), report);

        BadInputLineException e = assertThrows(BadInputLineException.class, () -> run("--input", input.toString(),
                "--output-prefix", dir.resolve("fail").toString(), "--tokenizer-type", "ByteLevel", "--no-progress"));
        assertEquals(5, e.lineNumber());
        assertTrue(e.getMessage().startsWith("file " + input + " line 5: "), e.getMessage());
        try (var files = Files.list(dir)) {
            assertFalse(files.anyMatch(p -> p.getFileName().toString().startsWith("fail")), "a failed run leaves no files");
        }
    }

    @Test
    void invalidUtf8IsABadLine() throws IOException {
        Path input = dir.resolve("latin1.jsonl");
        Files.write(input, new byte[] {'{', '"', 't', 'e', 'x', 't', '"', ':', '"', (byte) 0xE9, '"', '}', '\n'});
        BadInputLineException e = assertThrows(BadInputLineException.class, () -> run("--input", input.toString(),
                "--output-prefix", dir.resolve("x").toString(), "--tokenizer-type", "ByteLevel", "--no-progress"));
        assertTrue(e.getMessage().contains("line 1: not valid UTF-8"), e.getMessage());
    }

    @Test
    void commandLineErrorsAndProgress() throws IOException {
        ByteArrayOutputStream console = new ByteArrayOutputStream();
        PrintStream out = new PrintStream(console, true, StandardCharsets.UTF_8);
        assertEquals(2, Preprocess.execute(new String[] {"--input", "x.jsonl"}, out));
        assertTrue(console.toString(StandardCharsets.UTF_8).contains("usage: preprocess"));
        assertEquals(2, Preprocess.execute(new String[] {"--tokenizer-type", "Sentencepiece"}, out));
        assertEquals(2, Preprocess.execute(new String[] {"--input", "a", "--output-prefix", "b", "--tokenizer-type",
            "HuggingFaceTokenizer"}, out));
        assertTrue(console.toString(StandardCharsets.UTF_8).contains("needs --tokenizer-model"));
        console.reset();
        Path input = jsonl("p.jsonl", 3);
        assertEquals(0, Preprocess.execute(new String[] {"--input", input.toString(), "--output-prefix", dir.resolve("p").toString(),
            "--tokenizer-type", "ByteLevel", "--workers", "2"}, out));
        String printed = console.toString(StandardCharsets.UTF_8);
        assertTrue(printed.contains("100.0% | 12 docs |") && printed.contains("docs/s") && printed.contains("MB/s"), printed);
        assertTrue(Files.exists(DatasetFiles.idx(dir.resolve("p_text_document"))));
    }

    /** A WordLevel model with a Whitespace pre-tokenizer, written by hand. */
    private Path wordLevelTokenizer() throws IOException {
        String json = "{\n"
                + "  \"version\": \"1.0\", \"truncation\": null, \"padding\": null,\n"
                + "  \"added_tokens\": [\n"
                + "    {\"id\": 0, \"content\": \"[UNK]\", \"single_word\": false, \"lstrip\": false, \"rstrip\": false,"
                + " \"normalized\": false, \"special\": true},\n"
                + "    {\"id\": 6, \"content\": \"<|endoftext|>\", \"single_word\": false, \"lstrip\": false, \"rstrip\": false,"
                + " \"normalized\": false, \"special\": true}\n"
                + "  ],\n"
                + "  \"normalizer\": null,\n"
                + "  \"pre_tokenizer\": {\"type\": \"Whitespace\"},\n"
                + "  \"post_processor\": null,\n"
                + "  \"decoder\": null,\n"
                + "  \"model\": {\"type\": \"WordLevel\", \"unk_token\": \"[UNK]\", \"vocab\": {\"[UNK]\": 0, \"call\": 1, \"me\": 2,"
                + " \"ishmael\": 3, \".\": 4, \"line\": 5, \"<|endoftext|>\": 6}}\n"
                + "}\n";
        Path file = dir.resolve("tokenizer.json");
        Files.writeString(file, json, StandardCharsets.UTF_8);
        return file;
    }

    private static HuggingFaceTokenizerAdapter loadOrSkip(Path file) throws IOException {
        try {
            return HuggingFaceTokenizerAdapter.load(file, null);
        } catch (UnsatisfiedLinkError | NoClassDefFoundError | ExceptionInInitializerError e) {
            Assumptions.abort("DJL's HuggingFace tokenizers native library cannot load offline here: " + e);
            throw e;
        }
    }

    @Test
    void huggingFaceTokenizerGivesHandComputedIdsAndTheSameFilesForOneAndFourWorkers() throws IOException {
        Path tokenizerJson = wordLevelTokenizer();
        try (HuggingFaceTokenizerAdapter tokenizer = loadOrSkip(tokenizerJson)) {
            assertEquals(7, tokenizer.vocabularySize());
            assertEquals(6, tokenizer.endOfDocument().orElseThrow());
            assertArrayEquals(new int[] {1, 2, 3, 4}, tokenizer.encode("call me ishmael."));
            assertArrayEquals(new int[] {1, 0, 5}, tokenizer.encode("call  them\tline"));
        }
        Path input = dir.resolve("words.jsonl");
        List<String> lines = new ArrayList<>();
        for (int k = 0; k < 120; k++) {
            lines.add("{\"text\": \"" + (k % 3 == 0 ? "call me ishmael." : k % 3 == 1 ? "line line unknown" : "") + "\"}");
        }
        Files.write(input, lines, StandardCharsets.UTF_8);
        for (String workers : List.of("1", "4")) {
            PreprocessResult r = run("--input", input.toString(), "--output-prefix", dir.resolve("hf" + workers).toString(),
                    "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", tokenizerJson.toString(), "--append-eod",
                    "--workers", workers, "--batch-lines", "5", "--no-progress");
            assertEquals(120, r.documents());
            assertEquals(40 * 5 + 40 * 4, r.tokens());
        }
        for (String ext : List.of(".bin", ".idx")) {
            assertArrayEquals(Files.readAllBytes(dir.resolve("hf1_text_document" + ext)),
                    Files.readAllBytes(dir.resolve("hf4_text_document" + ext)), ext);
        }
        try (IndexedDatasetReader r = IndexedDatasetReader.open(dir.resolve("hf4_text_document"))) {
            assertEquals(DType.UINT16, r.dtype());
            assertArrayEquals(new int[] {1, 2, 3, 4, 6}, r.sequence(0).toIntArray());
            assertArrayEquals(new int[] {5, 5, 0, 6}, r.sequence(1).toIntArray());
            assertEquals(0, r.documentLength(2));
        }
    }

    @Test
    void anUnknownEndOfDocumentTokenIsNamed() throws IOException {
        Path tokenizerJson = wordLevelTokenizer();
        try {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> HuggingFaceTokenizerAdapter.load(tokenizerJson, "</s>"));
            assertTrue(e.getMessage().contains("\"</s>\" is not in the vocabulary"), e.getMessage());
        } catch (UnsatisfiedLinkError e) {
            Assumptions.abort("DJL's HuggingFace tokenizers native library cannot load offline here: " + e);
        }
    }
}
