package io.mcore4j.data.tokenizer;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.OptionalInt;

/**
 * A tokenizer without a vocabulary file: the ids of a text are the bytes of its UTF-8 encoding (0 to 255),
 * and 256 marks the end of a document, so the vocabulary has 257 ids. Stateless and safe for concurrent use.
 */
public final class ByteLevelTokenizer implements Tokenizer {
    /** The end-of-document id. */
    public static final int END_OF_DOCUMENT = 256;
    /** Number of ids: 256 byte values and the end-of-document id. */
    public static final int VOCABULARY_SIZE = 257;

    @Override
    public int[] encode(String text) {
        byte[] bytes = text.getBytes(StandardCharsets.UTF_8);
        int[] ids = new int[bytes.length];
        for (int k = 0; k < bytes.length; k++) {
            ids[k] = bytes[k] & 0xFF;
        }
        return ids;
    }

    /**
     * Turns ids back into text: end-of-document ids become nothing, and byte runs that are not valid UTF-8
     * (a sample cut inside a character) become U+FFFD.
     *
     * @param ids token ids in {@code [0, 257)}
     * @return the text
     * @throws IllegalArgumentException if an id is outside the vocabulary, naming it and its position
     */
    @Override
    public String decode(int[] ids) {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream(ids.length);
        for (int k = 0; k < ids.length; k++) {
            int id = ids[k];
            if (id < 0 || id >= VOCABULARY_SIZE) {
                throw new IllegalArgumentException("token id " + id + " at position " + k + " is outside the byte-level vocabulary [0, 257)");
            }
            if (id != END_OF_DOCUMENT) {
                bytes.write(id);
            }
        }
        return bytes.toString(StandardCharsets.UTF_8);
    }

    @Override
    public int vocabularySize() {
        return VOCABULARY_SIZE;
    }

    @Override
    public OptionalInt endOfDocument() {
        return OptionalInt.of(END_OF_DOCUMENT);
    }
}
