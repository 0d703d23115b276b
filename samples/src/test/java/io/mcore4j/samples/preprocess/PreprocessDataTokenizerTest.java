package io.mcore4j.samples.preprocess;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.data.indexed.IndexedDatasetReader;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * preprocess with Megatron's tokenizer flags: GPT2BPETokenizer, HuggingFaceTokenizer and NullTokenizer end to
 * end on a tiny JSON Lines file, and one-line refusals (exit 2) for a missing companion flag or file.
 */
class PreprocessDataTokenizerTest {
    /** The fixtures of scripts/tokenizer-fixtures/generate.py (data's test resources). */
    static final Path FIXTURES = Path.of("..", "data", "src", "test", "resources", "io", "mcore4j", "data", "tokenizer");

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

    private Path input(String... texts) throws IOException {
        Path file = dir.resolve("in.jsonl");
        Files.write(file, java.util.Arrays.stream(texts).map(t -> "{\"text\": \"" + t + "\"}").toList(), StandardCharsets.UTF_8);
        return file;
    }

    private static int[] document(Path prefix, int d) throws IOException {
        try (IndexedDatasetReader r = IndexedDatasetReader.open(prefix)) {
            int[] ids = new int[(int) r.documentLength(d)];
            r.readDocument(d, 0, ids.length, ids, 0);
            return ids;
        }
    }

    private Output preprocess(Path input, String name, String... tokenizerFlags) {
        List<String> argv = new java.util.ArrayList<>(List.of("--input", input.toString(), "--output-prefix",
                dir.resolve(name).toString(), "--append-eod", "--workers", "2", "--no-progress"));
        argv.addAll(List.of(tokenizerFlags));
        return run(argv.toArray(String[]::new));
    }

    @Test
    void eachTokenizerTypeWritesItsIdsAndItsEndOfDocument() throws IOException {
        // ids of "Hello, world!" and "the next" from transformers' GPT2Tokenizer (fixture expected.json); eod 0
        Path input = input("Hello, world!", "the next");
        Output gpt2 = preprocess(input, "gpt2", "--tokenizer-type", "GPT2BPETokenizer",
                "--vocab-file", FIXTURES.resolve("gpt2-vocab.json").toString(), "--merge-file", FIXTURES.resolve("gpt2-merges.txt").toString());
        assertEquals(0, gpt2.code, gpt2.err);
        assertArrayEquals(new int[] {40, 276, 321, 12, 283, 262, 76, 68, 1, 0}, document(dir.resolve("gpt2_text_document"), 0));
        assertArrayEquals(new int[] {257, 69, 303, 385, 84, 0}, document(dir.resolve("gpt2_text_document"), 1));

        Output hf = preprocess(input, "hf", "--tokenizer-type", "HuggingFaceTokenizer",
                "--tokenizer-model", FIXTURES.resolve("tokenizer.json").toString());
        assertEquals(0, hf.code, hf.err);
        assertArrayEquals(new int[] {40, 276, 321, 12, 283, 262, 76, 68, 1, 0}, document(dir.resolve("hf_text_document"), 0));

        Path ids = input("5 17 3", "99");
        Output nul = preprocess(ids, "null", "--tokenizer-type", "NullTokenizer", "--vocab-size", "100");
        assertEquals(0, nul.code, nul.err);
        assertArrayEquals(new int[] {5, 17, 3, 100}, document(dir.resolve("null_text_document"), 0));
        assertArrayEquals(new int[] {99, 100}, document(dir.resolve("null_text_document"), 1));
        Output outside = preprocess(ids, "outside", "--tokenizer-type", "NullTokenizer", "--vocab-size", "50");
        assertEquals(1, outside.code, outside.err);
        assertTrue(outside.err.contains("line 2: field \"text\": NullTokenizer: piece 1 \"99\" is not a token id in [0, 51)"), outside.err);
    }

    /** Exit code 2, one line holding exactly {@code message}, and nothing on standard output. */
    private static void assertRefused(Output o, String message) {
        assertEquals(2, o.code, o.err);
        String[] lines = o.err.split("\n");
        assertEquals(1, lines.length, o.err);
        assertEquals("preprocess: " + message + " ('preprocess --help' lists the flags)", lines[0]);
        assertEquals("", o.out);
    }

    @Test
    void aMissingCompanionFlagOrFileIsNamedOnOneLine() throws IOException {
        Path input = input("x");
        String vocab = FIXTURES.resolve("gpt2-vocab.json").toString();
        String merges = FIXTURES.resolve("gpt2-merges.txt").toString();
        assertRefused(preprocess(input, "a", "--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", vocab),
                "--tokenizer-type GPT2BPETokenizer needs --merge-file path/to/merges.txt");
        assertRefused(preprocess(input, "a", "--tokenizer-type", "GPT2BPETokenizer", "--merge-file", merges),
                "--tokenizer-type GPT2BPETokenizer needs --vocab-file path/to/vocab.json");
        Path missing = dir.resolve("no-such-vocab.json");
        assertRefused(preprocess(input, "a", "--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", missing.toString(),
                "--merge-file", merges), "--vocab-file " + missing + " does not exist");
        assertRefused(preprocess(input, "a", "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", dir.toString()),
                "--tokenizer-model " + dir.resolve("tokenizer.json") + " does not exist");
        assertRefused(preprocess(input, "a", "--tokenizer-type", "NullTokenizer", "--vocab-size", "0"),
                "--tokenizer-type NullTokenizer needs --vocab-size of at least 1 (got 0)");
        assertRefused(preprocess(input, "a", "--tokenizer-type", "ByteLevel", "--merge-file", merges),
                "--merge-file " + merges + " is read only by --tokenizer-type GPT2BPETokenizer, not by ByteLevel");
        assertRefused(preprocess(input, "a"), "--tokenizer-type is required");
        Path noEnd = Files.writeString(dir.resolve("vocab.json"), "{\"a\": 0}");
        assertRefused(preprocess(input, "a", "--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", noEnd.toString(),
                "--merge-file", merges), "vocab file " + noEnd + " has no <|endoftext|> token (GPT2BPETokenizer's end of document)");
        assertTrue(Files.notExists(dir.resolve("a_text_document.bin")), "a refused run writes nothing");
    }
}
