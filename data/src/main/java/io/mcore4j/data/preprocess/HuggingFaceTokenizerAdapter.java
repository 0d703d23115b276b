package io.mcore4j.data.preprocess;

import ai.djl.huggingface.tokenizers.Encoding;
import ai.djl.huggingface.tokenizers.HuggingFaceTokenizer;
import ai.djl.huggingface.tokenizers.jni.CharSpan;
import io.mcore4j.data.tokenizer.Tokenizer;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.OptionalInt;

/**
 * A HuggingFace {@code tokenizer.json} run by DJL's {@code ai.djl.huggingface:tokenizers} (a Rust library
 * shipped inside that jar), which is an optional dependency of this module: only code that loads this class
 * needs it on the class path.
 *
 * <p>DJL is put in offline mode ({@code ai.djl.offline=true}, {@code OPT_OUT_TRACKING=true}) before the
 * tokenizer is created, so it never touches the network. Texts are encoded as Megatron's
 * {@code HuggingFaceTokenizer} does: with the tokenizer's special tokens, without truncation or padding.
 * DJL exposes neither the vocabulary size nor the end-of-document token, so both are read from the
 * {@code tokenizer.json} itself, and, as Megatron's end of document is the tokenizer's {@code eos_token}, from a
 * {@code tokenizer_config.json} beside it when there is one. Each instance owns a native tokenizer that {@link #close()} frees; use one
 * instance per thread.
 */
public final class HuggingFaceTokenizerAdapter implements Tokenizer {
    /** End-of-document tokens looked for, in this order, when none is named. */
    public static final List<String> DEFAULT_EOD_TOKENS = List.of("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>");

    private final HuggingFaceTokenizer tokenizer;
    private final int vocabularySize;
    private final OptionalInt endOfDocument;

    private HuggingFaceTokenizerAdapter(HuggingFaceTokenizer tokenizer, int vocabularySize, OptionalInt endOfDocument) {
        this.tokenizer = tokenizer;
        this.vocabularySize = vocabularySize;
        this.endOfDocument = endOfDocument;
    }

    /**
     * Loads a {@code tokenizer.json}.
     *
     * @param tokenizerJson the file (or a directory holding {@code tokenizer.json})
     * @param eodToken the end-of-document token's text, or null for the {@code eos_token} of a
     *     {@code tokenizer_config.json} beside the file, else the first of {@link #DEFAULT_EOD_TOKENS} it has
     * @return the tokenizer
     * @throws IOException if the file cannot be read
     * @throws IllegalArgumentException if the file is not a tokenizer definition, or the named end-of-document
     *     token (or the configuration's {@code eos_token}) is not in it
     */
    public static HuggingFaceTokenizerAdapter load(Path tokenizerJson, String eodToken) throws IOException {
        Path file = Files.isDirectory(tokenizerJson) ? tokenizerJson.resolve("tokenizer.json") : tokenizerJson;
        Map<String, Integer> ids = vocabulary(file);
        int vocabularySize = ids.values().stream().mapToInt(Integer::intValue).max().orElse(-1) + 1;
        if (vocabularySize <= 0) {
            throw new IllegalArgumentException("tokenizer " + file + " has an empty vocabulary");
        }
        OptionalInt eod = OptionalInt.empty();
        String configured = eodToken != null ? null : configuredEos(file.resolveSibling("tokenizer_config.json"));
        if (eodToken != null || configured != null) {
            String token = eodToken != null ? eodToken : configured;
            Integer id = ids.get(token);
            if (id == null) {
                throw new IllegalArgumentException("end-of-document token \"" + token + "\"" + (eodToken != null ? ""
                        : " (eos_token of " + file.resolveSibling("tokenizer_config.json") + ")")
                        + " is not in the vocabulary of " + file);
            }
            eod = OptionalInt.of(id);
        } else {
            for (String candidate : DEFAULT_EOD_TOKENS) {
                if (ids.containsKey(candidate)) {
                    eod = OptionalInt.of(ids.get(candidate));
                    break;
                }
            }
        }
        System.setProperty("ai.djl.offline", "true");
        System.setProperty("OPT_OUT_TRACKING", "true");
        HuggingFaceTokenizer tokenizer = HuggingFaceTokenizer.newInstance(file,
                Map.of("addSpecialTokens", "true", "truncation", "false", "padding", "false"));
        return new HuggingFaceTokenizerAdapter(tokenizer, vocabularySize, eod);
    }

    /** The {@code eos_token} of a {@code tokenizer_config.json} (a string or an object with "content"), or null. */
    private static String configuredEos(Path config) throws IOException {
        if (!Files.isRegularFile(config)) {
            return null;
        }
        Object root;
        try {
            root = StrictJson.parse(Files.readString(config, StandardCharsets.UTF_8));
        } catch (JsonSyntaxException e) {
            throw new IllegalArgumentException("tokenizer configuration " + config + " is not valid JSON: " + e.getMessage(), e);
        }
        if (root instanceof Map<?, ?> top) {
            Object eos = top.get("eos_token");
            if (eos instanceof String text) {
                return text;
            }
            if (eos instanceof Map<?, ?> token && token.get("content") instanceof String content) {
                return content;
            }
        }
        return null;
    }

    /** Token text to id, from the model's vocabulary and the added tokens. */
    @SuppressWarnings("unchecked")
    private static Map<String, Integer> vocabulary(Path file) throws IOException {
        Object root;
        try {
            root = StrictJson.parse(Files.readString(file, StandardCharsets.UTF_8));
        } catch (JsonSyntaxException e) {
            throw new IllegalArgumentException("tokenizer " + file + " is not valid JSON: " + e.getMessage(), e);
        }
        if (!(root instanceof Map<?, ?> top) || !(top.get("model") instanceof Map<?, ?> model)) {
            throw new IllegalArgumentException("tokenizer " + file + " has no \"model\" object");
        }
        Map<String, Integer> ids = new HashMap<>();
        Object vocab = model.get("vocab");
        if (vocab instanceof Map<?, ?> map) {
            for (Map.Entry<?, ?> e : map.entrySet()) {
                ids.put((String) e.getKey(), toId(e.getValue(), file));
            }
        } else if (vocab instanceof List<?> pieces) {
            // Unigram: a list of [piece, score] whose ids are the positions
            for (int k = 0; k < pieces.size(); k++) {
                if (pieces.get(k) instanceof List<?> entry && !entry.isEmpty() && entry.get(0) instanceof String piece) {
                    ids.putIfAbsent(piece, k);
                }
            }
        } else {
            throw new IllegalArgumentException("tokenizer " + file + " has no model.vocab");
        }
        if (top.get("added_tokens") instanceof List<?> added) {
            for (Object o : added) {
                if (o instanceof Map<?, ?> token && token.get("content") instanceof String content) {
                    ids.put(content, toId(token.get("id"), file));
                }
            }
        }
        return ids;
    }

    private static int toId(Object value, Path file) {
        if (value instanceof Double d && d >= 0 && d <= Integer.MAX_VALUE && d == Math.rint(d)) {
            return d.intValue();
        }
        throw new IllegalArgumentException("tokenizer " + file + " has token id " + value + " (expected a non-negative integer)");
    }

    @Override
    public int[] encode(String text) {
        long[] ids = tokenizer.encode(text).getIds();
        int[] out = new int[ids.length];
        for (int k = 0; k < ids.length; k++) {
            out[k] = checkedId(ids[k]);
        }
        return out;
    }

    /**
     * Tokenizes a text and says where each token came from.
     *
     * @param text the text
     * @param addSpecialTokens add what the tokenizer's post-processor adds (a bos token); false as transformers'
     *     {@code apply_chat_template} tokenizes a rendered chat, whose template wrote its special tokens itself
     * @return the ids and each token's characters in {@code text} (UTF-16 indices; an added token that is
     *     not in the text has an empty span)
     */
    public TokenSpans encodeWithSpans(String text, boolean addSpecialTokens) {
        Encoding encoding = tokenizer.encode(text, addSpecialTokens, false);
        long[] ids = encoding.getIds();
        CharSpan[] spans = encoding.getCharTokenSpans();
        // the tokenizers library counts Unicode code points (Python's characters); Java counts UTF-16 units
        int[] utf16 = new int[text.codePointCount(0, text.length()) + 1];
        for (int cp = 0, i = 0; cp < utf16.length; cp++) {
            utf16[cp] = i;
            i = i < text.length() ? text.offsetByCodePoints(i, 1) : i;
        }
        int[] out = new int[ids.length];
        int[] starts = new int[ids.length];
        int[] ends = new int[ids.length];
        for (int k = 0; k < ids.length; k++) {
            out[k] = checkedId(ids[k]);
            starts[k] = spans[k] == null ? 0 : utf16[spans[k].getStart()];
            ends[k] = spans[k] == null ? 0 : utf16[spans[k].getEnd()];
        }
        return new TokenSpans(out, starts, ends);
    }

    private int checkedId(long id) {
        if (id < 0 || id >= vocabularySize) {
            throw new IllegalStateException("tokenizer produced id " + id + " outside its vocabulary of " + vocabularySize);
        }
        return (int) id;
    }

    @Override
    public String decode(int[] ids) {
        return tokenizer.decode(longs(ids));
    }

    /**
     * Turns token ids back into text, choosing what becomes of special tokens.
     *
     * @param ids token ids
     * @param skipSpecialTokens leave the tokenizer's special tokens ({@code <|eot_id|>}, {@code <s>}) out of the text,
     *     as transformers' {@code decode(ids, skip_special_tokens=True)} and OpenAI-compatible servers do
     * @return the text
     */
    public String decode(int[] ids, boolean skipSpecialTokens) {
        return tokenizer.decode(longs(ids), skipSpecialTokens);
    }

    private static long[] longs(int[] ids) {
        long[] longs = new long[ids.length];
        for (int k = 0; k < ids.length; k++) {
            longs[k] = ids[k];
        }
        return longs;
    }

    @Override
    public int vocabularySize() {
        return vocabularySize;
    }

    @Override
    public OptionalInt endOfDocument() {
        return endOfDocument;
    }

    @Override
    public void close() {
        tokenizer.close();
    }
}
