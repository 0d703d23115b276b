package io.mcore4j.data.tokenizer;

import java.util.OptionalInt;

/**
 * Turns text into token ids and back.
 *
 * <p>Implementations document whether they are safe for concurrent use; {@link #close()} releases any
 * native resources.
 */
public interface Tokenizer extends AutoCloseable {
    /**
     * Tokenizes a text.
     *
     * @param text the text
     * @return the token ids, each in {@code [0, vocabularySize())}
     */
    int[] encode(String text);

    /**
     * Turns token ids back into text.
     *
     * @param ids token ids
     * @return the text
     */
    String decode(int[] ids);

    /**
     * Number of distinct token ids (one more than the largest id).
     *
     * @return the vocabulary size
     */
    int vocabularySize();

    /**
     * The end-of-document token id, if the tokenizer has one.
     *
     * @return the id, or empty
     */
    OptionalInt endOfDocument();

    /** Releases resources; the default does nothing. */
    @Override
    default void close() {}
}
