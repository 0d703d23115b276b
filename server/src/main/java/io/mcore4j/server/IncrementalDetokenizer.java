package io.mcore4j.server;

import java.util.Arrays;

/**
 * Turns one request's tokens into text as they arrive, so that the pieces concatenate to the text of all the
 * tokens: each new token's text is read as the difference between decoding a short window of recent tokens with
 * and without it (a token's text can depend on its neighbours: a leading space, a character split over several
 * byte tokens), and held back while it ends in an incomplete character (U+FFFD) until {@link #flush()}. The window starts with the
 * prompt's last few tokens, as vLLM's does, so that the first token's leading space survives. Not thread-safe.
 */
final class IncrementalDetokenizer {
    /** Prompt tokens the first window starts with. */
    private static final int PROMPT_CONTEXT = 5;

    private final ServingTokenizer tokenizer;
    private int[] ids;
    private int size;
    private int prefixOffset;
    private int readOffset;

    /**
     * @param tokenizer the model's tokenizer
     * @param prompt the prompt's ids (its last few give the first tokens their context)
     */
    IncrementalDetokenizer(ServingTokenizer tokenizer, int[] prompt) {
        this.tokenizer = tokenizer;
        int context = Math.min(PROMPT_CONTEXT, prompt.length);
        this.ids = Arrays.copyOfRange(prompt, prompt.length - context, prompt.length + 16);
        this.size = context;
        this.prefixOffset = 0;
        this.readOffset = context;
    }

    /**
     * @param token the next generated id
     * @return the text it completes (may be empty while a character is incomplete)
     */
    String next(int token) {
        if (size == ids.length) {
            ids = Arrays.copyOf(ids, size * 2);
        }
        ids[size++] = token;
        String prefix = tokenizer.decode(Arrays.copyOfRange(ids, prefixOffset, readOffset));
        String full = tokenizer.decode(Arrays.copyOfRange(ids, prefixOffset, size));
        if (full.length() <= prefix.length() || full.endsWith("\uFFFD")) {
            return "";
        }
        prefixOffset = readOffset;
        readOffset = size;
        return full.substring(prefix.length());
    }

    /**
     * The text still held back once generation has ended: the tail of an incomplete character, as decoding all
     * the tokens at once renders it (U+FFFD).
     *
     * @return the text (often empty)
     */
    String flush() {
        String prefix = tokenizer.decode(Arrays.copyOfRange(ids, prefixOffset, readOffset));
        String full = tokenizer.decode(Arrays.copyOfRange(ids, prefixOffset, size));
        readOffset = size;
        return full.length() > prefix.length() ? full.substring(prefix.length()) : "";
    }
}
