package io.mcore4j.data.tokenizer;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** GPT2BPETokenizer against the ids of transformers' GPT2Tokenizer on the same vocab.json and merges.txt. */
class Gpt2BpeTokenizerTest {
    @TempDir
    Path dir;

    @Test
    void idsAreThoseOfTransformersGpt2TokenizerAndDecodeBackToTheText() throws IOException {
        Gpt2BpeTokenizer tokenizer = Gpt2BpeTokenizer.load(TokenizerFixtures.vocabFile(), TokenizerFixtures.mergeFile());
        int checked = 0;
        for (TokenizerFixtures.Case c : TokenizerFixtures.cases()) {
            assertArrayEquals(c.gpt2(), tokenizer.encode(c.text()), c.text());
            assertEquals(c.text(), tokenizer.decode(c.gpt2()), c.text());
            checked++;
        }
        assertEquals(11, checked);
        // the second call is served from the piece cache and must give the same ids
        TokenizerFixtures.Case first = TokenizerFixtures.cases().get(0);
        assertArrayEquals(first.gpt2(), tokenizer.encode(first.text()));
    }

    @Test
    void vocabularySizeIsTheNumberOfEntriesAndEndOfDocumentIsEndOfText() throws IOException {
        Gpt2BpeTokenizer tokenizer = Gpt2BpeTokenizer.load(TokenizerFixtures.vocabFile(), TokenizerFixtures.mergeFile());
        assertEquals(TokenizerFixtures.vocabularySize("gpt2"), tokenizer.vocabularySize());
        assertEquals(400, tokenizer.vocabularySize());
        assertEquals(TokenizerFixtures.endOfDocument("gpt2"), tokenizer.endOfDocument().orElseThrow());
        // Megatron's GPT2BPETokenizer has no special tokens: the text <|endoftext|> is not the end-of-document id
        int[] ids = tokenizer.encode("<|endoftext|>");
        assertTrue(ids.length > 1, java.util.Arrays.toString(ids));
        assertEquals("<|endoftext|>", tokenizer.decode(new int[] {tokenizer.endOfDocument().orElseThrow()}));
    }

    @Test
    void aCutCharacterDecodesToTheReplacementCharacter() throws IOException {
        Gpt2BpeTokenizer tokenizer = Gpt2BpeTokenizer.load(TokenizerFixtures.vocabFile(), TokenizerFixtures.mergeFile());
        int[] ids = tokenizer.encode("\u6771");
        assertEquals(3, ids.length, "three UTF-8 bytes, no merge in so small a vocabulary");
        assertEquals("\uFFFD", tokenizer.decode(new int[] {ids[0], ids[1]}));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> tokenizer.decode(new int[] {1, 400}));
        assertEquals("token id 400 at position 1 is outside the GPT2BPETokenizer vocabulary [0, 400)", e.getMessage());
    }

    private Path write(String name, String text) throws IOException {
        Path file = dir.resolve(name);
        Files.writeString(file, text, StandardCharsets.UTF_8);
        return file;
    }

    @Test
    void badFilesAreRefusedNamingTheFile() throws IOException {
        Path merges = write("merges.txt", "#version: 0.2\na b\n");
        Path noEnd = write("no-end.json", "{\"a\": 0, \"b\": 1, \"ab\": 2}");
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Gpt2BpeTokenizer.load(noEnd, merges));
        assertEquals("vocab file " + noEnd + " has no <|endoftext|> token (GPT2BPETokenizer's end of document)", e.getMessage());

        Path gap = write("gap.json", "{\"a\": 0, \"b\": 1, \"ab\": 2, \"<|endoftext|>\": 7}");
        e = assertThrows(IllegalArgumentException.class, () -> Gpt2BpeTokenizer.load(gap, merges));
        assertTrue(e.getMessage().startsWith("vocab file " + gap + " gives \"<|endoftext|>\" id 7 (expected each of the ids 0..3"),
                e.getMessage());

        Path notJson = write("not.json", "[\"a\"]");
        e = assertThrows(IllegalArgumentException.class, () -> Gpt2BpeTokenizer.load(notJson, merges));
        assertTrue(e.getMessage().startsWith("vocab file " + notJson + " is not a JSON object of token ids"), e.getMessage());

        Path vocab = write("vocab.json", "{\"a\": 0, \"b\": 1, \"ab\": 2, \"<|endoftext|>\": 3}");
        Path threeParts = write("three.txt", "#version: 0.2\na b c\n");
        e = assertThrows(IllegalArgumentException.class, () -> Gpt2BpeTokenizer.load(vocab, threeParts));
        assertEquals("merge file " + threeParts + " line 2 is \"a b c\" (expected two tokens separated by one space)", e.getMessage());

        Path unknown = write("unknown.txt", "a b\nab a\n");
        e = assertThrows(IllegalArgumentException.class, () -> Gpt2BpeTokenizer.load(vocab, unknown));
        assertEquals("merge file " + unknown + " line 2 merges \"ab a\" but vocab file " + vocab
                + " lacks the merged token \"aba\"", e.getMessage());
        assertEquals(1, e.getMessage().lines().count());
    }

    @Test
    void aByteTheVocabularyLacksIsNamed() throws IOException {
        Path vocab = write("vocab.json", "{\"a\": 0, \"b\": 1, \"ab\": 2, \"<|endoftext|>\": 3}");
        Path merges = write("merges.txt", "#version: 0.2\na b\n");
        Gpt2BpeTokenizer tokenizer = Gpt2BpeTokenizer.load(vocab, merges);
        assertArrayEquals(new int[] {2, 2}, tokenizer.encode("abab"), "every occurrence of the pair is merged");
        assertArrayEquals(new int[] {2, 1, 0}, tokenizer.encode("abba"));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> tokenizer.encode("abc"));
        assertEquals("GPT2BPETokenizer: the vocabulary has no token \"c\" for the text \"abc\" (a byte the vocab file does not cover)",
                e.getMessage());
    }
}
