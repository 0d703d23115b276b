package io.mcore4j.server;

/**
 * One token per character below 128 (id = the character's code), no special tokens: texts and token ids a test can
 * write by hand.
 */
final class CharTokenizer implements ServingTokenizer {
    static final int VOCABULARY = 128;

    @Override
    public int[] encode(String text, boolean addSpecialTokens) {
        int[] ids = new int[text.length()];
        for (int k = 0; k < ids.length; k++) {
            char c = text.charAt(k);
            if (c >= VOCABULARY) {
                throw new IllegalArgumentException("character " + (int) c + " is outside the test vocabulary");
            }
            ids[k] = c;
        }
        return ids;
    }

    @Override
    public String decode(int[] ids) {
        StringBuilder out = new StringBuilder();
        for (int id : ids) {
            out.append((char) id);
        }
        return out.toString();
    }
}
