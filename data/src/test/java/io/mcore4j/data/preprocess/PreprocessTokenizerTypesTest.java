package io.mcore4j.data.preprocess;

import io.mcore4j.data.indexed.DType;
import io.mcore4j.data.indexed.IndexedDatasetReader;
import io.mcore4j.data.tokenizer.Gpt2BpeTokenizer;
import io.mcore4j.data.tokenizer.TokenizerFixtures;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Megatron's tokenizer types in preprocessing: the HuggingFace tokenizer gives the ids of Python's
 * {@code tokenizers} on the fixture's tokenizer.json, and GPT2BPETokenizer, HuggingFaceTokenizer and
 * NullTokenizer each write the documents' ids followed by their end-of-document id.
 */
class PreprocessTokenizerTypesTest {
    @TempDir
    Path dir;

    private static HuggingFaceTokenizerAdapter loadOrSkip(Path file, String eod) throws IOException {
        try {
            return HuggingFaceTokenizerAdapter.load(file, eod);
        } catch (UnsatisfiedLinkError | NoClassDefFoundError | ExceptionInInitializerError e) {
            Assumptions.abort("DJL's HuggingFace tokenizers native library cannot load offline here: " + e);
            throw e;
        }
    }

    @Test
    void huggingFaceIdsAreThoseOfPythonTokenizers() throws IOException {
        try (HuggingFaceTokenizerAdapter tokenizer = loadOrSkip(TokenizerFixtures.tokenizerJson(), null)) {
            assertEquals(TokenizerFixtures.vocabularySize("hf"), tokenizer.vocabularySize());
            assertEquals(TokenizerFixtures.endOfDocument("hf"), tokenizer.endOfDocument().orElseThrow());
            for (TokenizerFixtures.Case c : TokenizerFixtures.cases()) {
                assertArrayEquals(c.hf(), tokenizer.encode(c.text()), c.text());
            }
        }
    }

    @Test
    void theEosTokenOfTokenizerConfigIsTheEndOfDocument() throws IOException {
        Path model = Files.createDirectories(dir.resolve("model"));
        Files.copy(TokenizerFixtures.tokenizerJson(), model.resolve("tokenizer.json"));
        Files.writeString(model.resolve("tokenizer_config.json"), "{\"eos_token\": {\"content\": \"\u0120a\"}, \"bos_token\": null}");
        int spaceA = Gpt2BpeTokenizer.load(TokenizerFixtures.vocabFile(), TokenizerFixtures.mergeFile()).encode(" a")[0];
        try (HuggingFaceTokenizerAdapter tokenizer = loadOrSkip(model, null)) {
            assertEquals(spaceA, tokenizer.endOfDocument().orElseThrow());
        }
        try (HuggingFaceTokenizerAdapter tokenizer = loadOrSkip(model, "<|endoftext|>")) {
            assertEquals(0, tokenizer.endOfDocument().orElseThrow(), "--eod-token wins over the configuration");
        }
        Files.writeString(model.resolve("tokenizer_config.json"), "{\"eos_token\": \"</s>\"}");
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> loadOrSkip(model, null));
        assertEquals("end-of-document token \"</s>\" (eos_token of " + model.resolve("tokenizer_config.json")
                + ") is not in the vocabulary of " + model.resolve("tokenizer.json"), e.getMessage());
    }

    private Path jsonl(List<String> texts) throws IOException {
        List<String> lines = new ArrayList<>();
        for (String t : texts) {
            lines.add("{\"text\": " + new com.google.gson.JsonPrimitive(t) + "}"); // JSON escapes, control characters included
        }
        Path file = dir.resolve("input-" + System.nanoTime() + ".jsonl");
        Files.write(file, lines, StandardCharsets.UTF_8);
        return file;
    }

    /** Runs preprocess with one and with three workers; both write the same files, whose documents are returned. */
    private List<int[]> preprocess(PreprocessOptions.Builder builderFor1, PreprocessOptions.Builder builderFor3, String name)
            throws IOException {
        Preprocess.run(builderFor1.workers(1).batchLines(2).progress(false).appendEod(true).build(), null);
        Preprocess.run(builderFor3.workers(3).batchLines(2).progress(false).appendEod(true).build(), null);
        for (String ext : List.of(".bin", ".idx")) {
            assertArrayEquals(Files.readAllBytes(dir.resolve(name + "1_text_document" + ext)),
                    Files.readAllBytes(dir.resolve(name + "3_text_document" + ext)), ext);
        }
        List<int[]> documents = new ArrayList<>();
        try (IndexedDatasetReader r = IndexedDatasetReader.open(dir.resolve(name + "1_text_document"))) {
            assertEquals(DType.UINT16, r.dtype());
            for (int d = 0; d < r.documentCount(); d++) {
                int[] ids = new int[(int) r.documentLength(d)];
                r.readDocument(d, 0, ids.length, ids, 0);
                documents.add(ids);
            }
        }
        return documents;
    }

    private static int[] withEod(int[] ids, int eod) {
        if (ids.length == 0) {
            return ids;
        }
        int[] out = Arrays.copyOf(ids, ids.length + 1);
        out[ids.length] = eod;
        return out;
    }

    @Test
    void gpt2BpeAndHuggingFaceDocumentsAreThePythonIdsAndTheEndOfDocument() throws IOException {
        List<TokenizerFixtures.Case> cases = TokenizerFixtures.cases();
        Path input = jsonl(cases.stream().map(TokenizerFixtures.Case::text).toList());
        PreprocessOptions.TokenizerType gpt2 = PreprocessOptions.TokenizerType.GPT2_BPE;
        List<int[]> documents = preprocess(
                PreprocessOptions.builder(input, dir.resolve("gpt1"), gpt2).gpt2Files(TokenizerFixtures.vocabFile(), TokenizerFixtures.mergeFile()),
                PreprocessOptions.builder(input, dir.resolve("gpt3"), gpt2).gpt2Files(TokenizerFixtures.vocabFile(), TokenizerFixtures.mergeFile()),
                "gpt");
        assertEquals(cases.size(), documents.size());
        for (int k = 0; k < cases.size(); k++) {
            assertArrayEquals(withEod(cases.get(k).gpt2(), 0), documents.get(k), cases.get(k).text());
        }
        loadOrSkip(TokenizerFixtures.tokenizerJson(), null).close(); // skips the rest where DJL's native library cannot load
        PreprocessOptions.TokenizerType hf = PreprocessOptions.TokenizerType.HUGGING_FACE;
        documents = preprocess(PreprocessOptions.builder(input, dir.resolve("hf1"), hf).tokenizerModel(TokenizerFixtures.tokenizerJson()),
                PreprocessOptions.builder(input, dir.resolve("hf3"), hf).tokenizerModel(TokenizerFixtures.tokenizerJson()), "hf");
        for (int k = 0; k < cases.size(); k++) {
            assertArrayEquals(withEod(cases.get(k).hf(), 0), documents.get(k), cases.get(k).text());
        }
    }

    @Test
    void nullTokenizerDocumentsAreTheirIdsAndTheVocabSizeAndABadLineIsNamed() throws IOException {
        Path input = jsonl(List.of("5 17 3", "", "785 0", "12"));
        PreprocessOptions.TokenizerType type = PreprocessOptions.TokenizerType.NULL;
        List<int[]> documents = preprocess(PreprocessOptions.builder(input, dir.resolve("null1"), type),
                PreprocessOptions.builder(input, dir.resolve("null3"), type), "null");
        assertEquals(4, documents.size());
        // Megatron's default --vocab-size of preprocessing is 786, the end-of-document id
        assertArrayEquals(new int[] {5, 17, 3, 786}, documents.get(0));
        assertArrayEquals(new int[0], documents.get(1));
        assertArrayEquals(new int[] {785, 0, 786}, documents.get(2));
        assertArrayEquals(new int[] {12, 786}, documents.get(3));

        Path bad = jsonl(List.of("1 2", "1 two"));
        BadInputLineException e = assertThrows(BadInputLineException.class, () -> Preprocess.run(
                PreprocessOptions.builder(bad, dir.resolve("bad"), type).vocabSize(10).progress(false).build(), null));
        assertTrue(e.getMessage().contains("line 2: field \"text\": NullTokenizer: piece 2 \"two\" is not a token id in [0, 11)"),
                e.getMessage());
    }

    @Test
    void eachTypeNeedsItsCompanionFlagsAndNoOther() {
        Path input = dir.resolve("a.jsonl");
        Path out = dir.resolve("b");
        PreprocessOptions.TokenizerType gpt2 = PreprocessOptions.TokenizerType.GPT2_BPE;
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> PreprocessOptions.builder(input, out, gpt2).build());
        assertEquals("--tokenizer-type GPT2BPETokenizer needs --vocab-file path/to/vocab.json", e.getMessage());
        e = assertThrows(IllegalArgumentException.class,
                () -> PreprocessOptions.builder(input, out, gpt2).gpt2Files(Path.of("v.json"), null).build());
        assertEquals("--tokenizer-type GPT2BPETokenizer needs --merge-file path/to/merges.txt", e.getMessage());
        e = assertThrows(IllegalArgumentException.class,
                () -> PreprocessOptions.builder(input, out, PreprocessOptions.TokenizerType.NULL).vocabSize(0).build());
        assertEquals("--tokenizer-type NullTokenizer needs --vocab-size of at least 1 (got 0)", e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> PreprocessOptions.builder(input, out,
                PreprocessOptions.TokenizerType.HUGGING_FACE).tokenizerModel(Path.of("t.json")).gpt2Files(Path.of("v.json"), null).build());
        assertEquals("--vocab-file v.json is read only by --tokenizer-type GPT2BPETokenizer, not by HuggingFaceTokenizer", e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> PreprocessOptions.builder(input, out,
                PreprocessOptions.TokenizerType.BYTE_LEVEL).eodToken("</s>").build());
        assertEquals("--eod-token </s> names a token of --tokenizer-type HuggingFaceTokenizer; ByteLevel has a fixed one", e.getMessage());
        assertEquals(PreprocessOptions.TokenizerType.GPT2_BPE, PreprocessOptions.TokenizerType.fromArgument("GPT2BPETokenizer"));
        assertEquals(PreprocessOptions.TokenizerType.NULL, PreprocessOptions.TokenizerType.fromArgument("NullTokenizer"));
    }
}
