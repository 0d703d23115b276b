package io.mcore4j.server;

import io.mcore4j.data.preprocess.HuggingFaceTokenizerAdapter;
import io.mcore4j.data.tokenizer.Tokenizer;

/**
 * Text to token ids and back, as the server needs it: safe for concurrent use (request threads tokenize prompts
 * and detokenize streams at once).
 */
public interface ServingTokenizer {
    /**
     * @param text the text
     * @param addSpecialTokens add what the tokenizer's post-processor adds (a begin-of-text token): true for a
     *     completion's prompt, false for a rendered chat, whose template wrote its special tokens itself
     * @return the ids
     */
    int[] encode(String text, boolean addSpecialTokens);

    /**
     * @param ids token ids
     * @return their text as a client reads it: special tokens left out
     */
    String decode(int[] ids);

    /**
     * A Hugging Face tokenizer, its calls serialised (DJL's tokenizer is one per thread).
     *
     * @param tokenizer the tokenizer; the server does not close it
     * @return the serving tokenizer
     */
    static ServingTokenizer of(HuggingFaceTokenizerAdapter tokenizer) {
        return new ServingTokenizer() {
            @Override
            public synchronized int[] encode(String text, boolean addSpecialTokens) {
                return tokenizer.encodeWithSpans(text, addSpecialTokens).ids();
            }

            @Override
            public synchronized String decode(int[] ids) {
                return tokenizer.decode(ids, true);
            }
        };
    }

    /**
     * A tokenizer that adds no special tokens and decodes none (mcore4j's byte-level tokenizer, whose only special id,
     * the end of document, ends generation and is never decoded), its calls serialised.
     *
     * @param tokenizer the tokenizer; the server does not close it
     * @return the serving tokenizer
     */
    static ServingTokenizer withoutSpecialTokens(Tokenizer tokenizer) {
        return new ServingTokenizer() {
            @Override
            public synchronized int[] encode(String text, boolean addSpecialTokens) {
                return tokenizer.encode(text);
            }

            @Override
            public synchronized String decode(int[] ids) {
                return tokenizer.decode(ids);
            }
        };
    }
}
