package io.mcore4j.data.tokenizer;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

/** Megatron's NullTokenizer: ids written as text, vocabulary --vocab-size + 1, end of document --vocab-size. */
class NullTokenizerTest {
    @Test
    void textsAreSpaceSeparatedIdsAndTheEndOfDocumentIsTheVocabSize() {
        NullTokenizer tokenizer = new NullTokenizer(1000);
        assertEquals(1001, tokenizer.vocabularySize());
        assertEquals(1000, tokenizer.endOfDocument().orElseThrow());
        assertArrayEquals(new int[] {5, 17, 0, 999, 1000}, tokenizer.encode("5 17 0 999 1000"));
        assertArrayEquals(new int[] {3, 4}, tokenizer.encode("3 4\n"), "int() strips white space around a piece");
        assertArrayEquals(new int[0], tokenizer.encode(""));
        assertEquals("5 17 0", tokenizer.decode(new int[] {5, 17, 0}));
    }

    @Test
    void aPieceThatIsNotAnIdInTheVocabularyIsNamed() {
        NullTokenizer tokenizer = new NullTokenizer(10);
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> tokenizer.encode("1 11"));
        assertEquals("NullTokenizer: piece 2 \"11\" is not a token id in [0, 11) (a NullTokenizer text is ids separated by single spaces)",
                e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> tokenizer.encode("1  2"), "two spaces leave an empty piece");
        assertThrows(IllegalArgumentException.class, () -> tokenizer.encode("one"));
        assertThrows(IllegalArgumentException.class, () -> tokenizer.encode("-1"));
        IllegalArgumentException size = assertThrows(IllegalArgumentException.class, () -> new NullTokenizer(0));
        assertEquals("NullTokenizer --vocab-size 0 must be between 1 and 2147483646", size.getMessage());
    }
}
