package io.mcore4j.data.preprocess;

import io.mcore4j.data.indexed.DType;
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

    private static PreprocessOptions.Builder byteLevel(Path input, Path outputPrefix) {
        return PreprocessOptions.builder(input, outputPrefix, PreprocessOptions.TokenizerType.BYTE_LEVEL).progress(false);
    }

    @Test
    void byteLevelOutputHoldsTheTextsAndIsTheSameForOneAndFourWorkers() throws IOException {
        Path input = jsonl("corpus.jsonl", 50);
        PreprocessResult one = Preprocess.run(byteLevel(input, dir.resolve("w1")).appendEod(true).workers(1).batchLines(7).build(), null);
        PreprocessResult four = Preprocess.run(byteLevel(input, dir.resolve("w4")).appendEod(true).workers(4).batchLines(7).build(), null);
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
        Preprocess.run(byteLevel(input, dir.resolve("out")).jsonKeys(List.of("text", "title")).build(), null);
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
        PreprocessResult r = Preprocess.run(byteLevel(input, dir.resolve("skip")).onBadLine(PreprocessOptions.BadLinePolicy.SKIP).build(),
                new PrintStream(console, true, StandardCharsets.UTF_8));
        assertEquals(5, r.documents());
        assertEquals(2, r.skippedLines());
        assertEquals(1, r.blankLines());
        String report = console.toString(StandardCharsets.UTF_8);
        assertTrue(report.contains("bad.jsonl line 5: End of input at column 14 (skipped)"), report);
        assertTrue(report.contains("bad.jsonl line 7: field \"text\" is not a string but a number at column 11 (skipped)"), report);

        BadInputLineException e = assertThrows(BadInputLineException.class,
                () -> Preprocess.run(byteLevel(input, dir.resolve("fail")).build(), null));
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
        BadInputLineException e = assertThrows(BadInputLineException.class,
                () -> Preprocess.run(byteLevel(input, dir.resolve("x")).build(), null));
        assertTrue(e.getMessage().contains("line 1: not valid UTF-8"), e.getMessage());
    }

    @Test
    void invalidSettingsAreNamed() {
        Path input = dir.resolve("a.jsonl");
        IllegalArgumentException noModel = assertThrows(IllegalArgumentException.class, () -> PreprocessOptions.builder(input,
                dir.resolve("b"), PreprocessOptions.TokenizerType.HUGGING_FACE).build());
        assertTrue(noModel.getMessage().contains("needs --tokenizer-model"), noModel.getMessage());
        IllegalArgumentException workers = assertThrows(IllegalArgumentException.class,
                () -> byteLevel(input, dir.resolve("b")).workers(0).build());
        assertEquals("--workers 0 must be at least 1", workers.getMessage());
        IllegalArgumentException type = assertThrows(IllegalArgumentException.class,
                () -> PreprocessOptions.TokenizerType.fromArgument("Sentencepiece"));
        assertTrue(type.getMessage().contains("Sentencepiece"), type.getMessage());
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
            PreprocessResult r = Preprocess.run(PreprocessOptions.builder(input, dir.resolve("hf" + workers),
                    PreprocessOptions.TokenizerType.HUGGING_FACE).tokenizerModel(tokenizerJson).appendEod(true)
                    .workers(Integer.parseInt(workers)).batchLines(5).progress(false).build(), null);
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
