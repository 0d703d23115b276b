package io.mcore4j.data.tokenizer;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class ByteLevelTokenizerTest {
    private final ByteLevelTokenizer tokenizer = new ByteLevelTokenizer();

    @Test
    void idsAreTheUtf8Bytes() {
        // 'h', then U+00E9 as C3 A9, then U+1F600 as F0 9F 98 80
        assertArrayEquals(new int[] {104, 0xC3, 0xA9, 0xF0, 0x9F, 0x98, 0x80}, tokenizer.encode("h\u00e9\uD83D\uDE00"));
        assertArrayEquals(new int[] {}, tokenizer.encode(""));
        assertEquals(257, tokenizer.vocabularySize());
        assertEquals(256, tokenizer.endOfDocument().orElseThrow());
    }

    @Test
    void decodeInvertsEncodeAndDropsEndOfDocument() {
        String text = "Call me Ishmael. \u00c7a va? \u4e2d\u6587\n";
        assertEquals(text, tokenizer.decode(tokenizer.encode(text)));
        assertEquals("ab", tokenizer.decode(new int[] {97, 256, 98}));
        assertEquals("\uFFFD", tokenizer.decode(new int[] {0xC3})); // a character cut in half
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> tokenizer.decode(new int[] {1, 257}));
        assertTrue(e.getMessage().contains("257") && e.getMessage().contains("position 1"), e.getMessage());
    }
}
