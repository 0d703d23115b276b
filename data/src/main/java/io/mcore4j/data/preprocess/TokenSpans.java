package io.mcore4j.data.preprocess;

/**
 * A text's tokens and where each came from ({@link HuggingFaceTokenizerAdapter#encodeWithSpans}).
 *
 * @param ids the token ids
 * @param starts each token's first character in the text (UTF-16 index)
 * @param ends one past each token's last character; equal to the start for a token not in the text
 */
public record TokenSpans(int[] ids, int[] starts, int[] ends) {
    /** Checks the lengths. */
    public TokenSpans {
        if (starts.length != ids.length || ends.length != ids.length) {
            throw new IllegalArgumentException(ids.length + " ids but " + starts.length + " starts and " + ends.length + " ends");
        }
    }
}
