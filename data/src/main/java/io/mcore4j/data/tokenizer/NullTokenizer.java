package io.mcore4j.data.tokenizer;

import java.util.OptionalInt;

/**
 * Megatron-LM's {@code NullTokenizer}: a text is its token ids written in decimal and separated by single
 * spaces ({@code "5 17 3"}), for data that is already tokenized and for benchmarks. Given Megatron's
 * {@code --vocab-size} n (the vocabulary before the end-of-document id), the end-of-document id is n and
 * the vocabulary size is n + 1. Stateless and safe for concurrent use.
 *
 * <p>Where Megatron's {@code int()} would raise on an empty text, this tokenizer gives no ids, so that an
 * empty document stays an empty document; a piece that is not an id in {@code [0, n]} is refused.
 */
public final class NullTokenizer implements Tokenizer {
    private final int vocabularyWithoutEod;

    /**
     * @param vocabularyWithoutEod Megatron's {@code --vocab-size}: ids {@code 0..n-1}, n being the end of document
     * @throws IllegalArgumentException if it is not positive or leaves no room for the end-of-document id
     */
    public NullTokenizer(int vocabularyWithoutEod) {
        if (vocabularyWithoutEod < 1 || vocabularyWithoutEod == Integer.MAX_VALUE) {
            throw new IllegalArgumentException("NullTokenizer --vocab-size " + vocabularyWithoutEod
                    + " must be between 1 and " + (Integer.MAX_VALUE - 1));
        }
        this.vocabularyWithoutEod = vocabularyWithoutEod;
    }

    /**
     * Reads the ids of a text.
     *
     * @param text ids separated by single spaces (each may carry surrounding white space, as Python's
     *     {@code int()} allows), or the empty text
     * @return the ids
     * @throws IllegalArgumentException naming the first piece that is not an id in {@code [0, vocabularySize())}
     */
    @Override
    public int[] encode(String text) {
        if (text.isEmpty()) {
            return new int[0];
        }
        String[] pieces = text.split(" ", -1);
        int[] ids = new int[pieces.length];
        for (int k = 0; k < pieces.length; k++) {
            String piece = pieces[k].strip();
            long id;
            try {
                id = Long.parseLong(piece);
            } catch (NumberFormatException e) {
                id = -1;
            }
            if (id < 0 || id > vocabularyWithoutEod) {
                throw new IllegalArgumentException("NullTokenizer: piece " + (k + 1) + " \"" + pieces[k]
                        + "\" is not a token id in [0, " + vocabularySize() + ") (a NullTokenizer text is ids separated by single spaces)");
            }
            ids[k] = (int) id;
        }
        return ids;
    }

    /**
     * Writes ids as Megatron's {@code NullTokenizer} does: in decimal, separated by single spaces.
     *
     * @param ids token ids
     * @return the text
     */
    @Override
    public String decode(int[] ids) {
        StringBuilder text = new StringBuilder(ids.length * 6);
        for (int k = 0; k < ids.length; k++) {
            if (k > 0) {
                text.append(' ');
            }
            text.append(ids[k]);
        }
        return text.toString();
    }

    /** @return Megatron's {@code --vocab-size} + 1 (the end-of-document id included) */
    @Override
    public int vocabularySize() {
        return vocabularyWithoutEod + 1;
    }

    /** @return Megatron's {@code --vocab-size} */
    @Override
    public OptionalInt endOfDocument() {
        return OptionalInt.of(vocabularyWithoutEod);
    }
}
