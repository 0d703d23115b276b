package io.mcore4j.data.preprocess;

import java.nio.file.Path;
import java.util.List;

/**
 * Settings of one {@link Preprocess} run, named after the {@code preprocess} command's flags (Megatron-LM's
 * {@code tools/preprocess_data.py} where it has them); {@link #builder} fills in the defaults.
 *
 * @param input the JSON Lines file
 * @param jsonKeys fields to tokenize; each gets its own dataset
 * @param tokenizerType which tokenizer
 * @param tokenizerModel the {@code tokenizer.json} (HuggingFace tokenizer only, else null)
 * @param eodToken text of the end-of-document token (HuggingFace tokenizer only; null to look for a usual one)
 * @param vocabFile GPT-2's {@code vocab.json} (GPT2BPETokenizer only, else null)
 * @param mergeFile GPT-2's {@code merges.txt} (GPT2BPETokenizer only, else null)
 * @param vocabSize Megatron's {@code --vocab-size}: the NullTokenizer's ids before its end-of-document id
 * @param appendEod whether to end each non-empty document with the end-of-document id
 * @param workers tokenizing threads
 * @param outputPrefix datasets are written to {@code <outputPrefix>_<key>_document.bin/.idx}
 * @param onBadLine what to do with a line that is not a JSON object with the keys as strings
 * @param batchLines lines handed to a worker at a time
 * @param progress whether to draw a progress bar on the console
 */
public record PreprocessOptions(Path input, List<String> jsonKeys, TokenizerType tokenizerType, Path tokenizerModel,
                                String eodToken, Path vocabFile, Path mergeFile, int vocabSize, boolean appendEod, int workers, Path outputPrefix,
                                BadLinePolicy onBadLine, int batchLines, boolean progress) {

    /** The tokenizers {@code --tokenizer-type} accepts. */
    public enum TokenizerType {
        /** UTF-8 bytes as ids, needs no file ({@code ByteLevel}). */
        BYTE_LEVEL("ByteLevel"),
        /** A {@code tokenizer.json} through DJL ({@code HuggingFaceTokenizer}). */
        HUGGING_FACE("HuggingFaceTokenizer"),
        /** GPT-2's byte-level BPE from {@code vocab.json} and {@code merges.txt} ({@code GPT2BPETokenizer}). */
        GPT2_BPE("GPT2BPETokenizer"),
        /** Texts of space-separated ids, Megatron's {@code NullTokenizer}. */
        NULL("NullTokenizer");

        private final String argument;

        TokenizerType(String argument) {
            this.argument = argument;
        }

        /**
         * The command-line spelling.
         *
         * @return e.g. {@code ByteLevel}
         */
        public String argument() {
            return argument;
        }

        /**
         * The tokenizer a command-line spelling names.
         *
         * @param value {@code ByteLevel}, {@code GPT2BPETokenizer}, {@code HuggingFaceTokenizer} or {@code NullTokenizer}
         * @return the tokenizer type
         * @throws IllegalArgumentException naming the value and the accepted ones
         */
        public static TokenizerType fromArgument(String value) {
            for (TokenizerType t : values()) {
                if (t.argument.equals(value)) {
                    return t;
                }
            }
            throw new IllegalArgumentException("--tokenizer-type " + value
                    + " is unknown (expected GPT2BPETokenizer, HuggingFaceTokenizer, NullTokenizer or ByteLevel; for a"
                    + " SentencePiece or tiktoken model, HuggingFaceTokenizer reads its tokenizer.json)");
        }
    }

    /** What happens to a malformed input line. */
    public enum BadLinePolicy {
        /** Report it with its line number and go on. */
        SKIP,
        /** Report it and stop; no output files are left behind. */
        FAIL
    }

    /** Validates the settings. */
    public PreprocessOptions {
        if (input == null || outputPrefix == null || tokenizerType == null || onBadLine == null) {
            throw new IllegalArgumentException("--input, --output-prefix and --tokenizer-type are required");
        }
        jsonKeys = List.copyOf(jsonKeys);
        if (jsonKeys.isEmpty() || jsonKeys.stream().anyMatch(String::isEmpty) || jsonKeys.stream().distinct().count() != jsonKeys.size()) {
            throw new IllegalArgumentException("--json-keys " + jsonKeys + " must be distinct, non-empty names");
        }
        new TokenizerSpec(tokenizerType, vocabFile, mergeFile, tokenizerModel, eodToken, vocabSize); // validates the combination
        if (workers < 1) {
            throw new IllegalArgumentException("--workers " + workers + " must be at least 1");
        }
        if (batchLines < 1) {
            throw new IllegalArgumentException("--batch-lines " + batchLines + " must be at least 1");
        }
    }

    /** Default of {@code --workers}. */
    public static final int DEFAULT_WORKERS = 1;
    /** Default of {@code --batch-lines}. */
    public static final int DEFAULT_BATCH_LINES = 256;
    /** Default of {@code --vocab-size} (Megatron's {@code tools/preprocess_data.py} default). */
    public static final int DEFAULT_VOCAB_SIZE = 786;
    /** Default of {@code --json-keys}. */
    public static final List<String> DEFAULT_JSON_KEYS = List.of("text");

    /**
     * Starts settings with the three required values; the rest default as on the command line (key {@code text},
     * no end-of-document, one worker, {@link BadLinePolicy#FAIL}, 256 lines a batch, a progress bar).
     *
     * @param input the JSON Lines file
     * @param outputPrefix prefix of the written datasets
     * @param tokenizerType which tokenizer
     * @return a builder
     */
    public static Builder builder(Path input, Path outputPrefix, TokenizerType tokenizerType) {
        return new Builder(input, outputPrefix, tokenizerType);
    }

    /** Collects settings; {@link #build()} validates them. */
    public static final class Builder {
        private final Path input;
        private final Path outputPrefix;
        private final TokenizerType tokenizerType;
        private List<String> jsonKeys = DEFAULT_JSON_KEYS;
        private Path tokenizerModel;
        private String eodToken;
        private Path vocabFile;
        private Path mergeFile;
        private int vocabSize = DEFAULT_VOCAB_SIZE;
        private boolean appendEod;
        private int workers = DEFAULT_WORKERS;
        private BadLinePolicy onBadLine = BadLinePolicy.FAIL;
        private int batchLines = DEFAULT_BATCH_LINES;
        private boolean progress = true;

        private Builder(Path input, Path outputPrefix, TokenizerType tokenizerType) {
            this.input = input;
            this.outputPrefix = outputPrefix;
            this.tokenizerType = tokenizerType;
        }

        /**
         * Sets {@code --json-keys}.
         *
         * @param keys fields to tokenize
         * @return this builder
         */
        public Builder jsonKeys(List<String> keys) {
            this.jsonKeys = keys;
            return this;
        }

        /**
         * Sets {@code --tokenizer-model}.
         *
         * @param file the {@code tokenizer.json}
         * @return this builder
         */
        public Builder tokenizerModel(Path file) {
            this.tokenizerModel = file;
            return this;
        }

        /**
         * Sets {@code --eod-token}.
         *
         * @param text the end-of-document token's text, or null to look for a usual one
         * @return this builder
         */
        public Builder eodToken(String text) {
            this.eodToken = text;
            return this;
        }

        /**
         * Sets {@code --vocab-file} and {@code --merge-file}.
         *
         * @param vocab GPT-2's {@code vocab.json}
         * @param merges GPT-2's {@code merges.txt}
         * @return this builder
         */
        public Builder gpt2Files(Path vocab, Path merges) {
            this.vocabFile = vocab;
            this.mergeFile = merges;
            return this;
        }

        /**
         * Sets {@code --vocab-size}.
         *
         * @param size the NullTokenizer's ids before its end-of-document id
         * @return this builder
         */
        public Builder vocabSize(int size) {
            this.vocabSize = size;
            return this;
        }

        /**
         * Sets {@code --append-eod}.
         *
         * @param on whether to end each non-empty document with the end-of-document id
         * @return this builder
         */
        public Builder appendEod(boolean on) {
            this.appendEod = on;
            return this;
        }

        /**
         * Sets {@code --workers}.
         *
         * @param count tokenizing threads
         * @return this builder
         */
        public Builder workers(int count) {
            this.workers = count;
            return this;
        }

        /**
         * Sets {@code --on-bad-line}.
         *
         * @param policy what to do with a malformed line
         * @return this builder
         */
        public Builder onBadLine(BadLinePolicy policy) {
            this.onBadLine = policy;
            return this;
        }

        /**
         * Sets {@code --batch-lines}.
         *
         * @param lines lines handed to a worker at a time
         * @return this builder
         */
        public Builder batchLines(int lines) {
            this.batchLines = lines;
            return this;
        }

        /**
         * Sets the opposite of {@code --no-progress}.
         *
         * @param on whether to draw a progress bar on an interactive console
         * @return this builder
         */
        public Builder progress(boolean on) {
            this.progress = on;
            return this;
        }

        /**
         * Validates and returns the settings.
         *
         * @return the settings
         * @throws IllegalArgumentException naming the flag whose value is wrong
         */
        public PreprocessOptions build() {
            return new PreprocessOptions(input, jsonKeys, tokenizerType, tokenizerModel, eodToken, vocabFile, mergeFile,
                    vocabSize, appendEod, workers,
                    outputPrefix, onBadLine, batchLines, progress);
        }
    }

    /**
     * The tokenizer these settings name.
     *
     * @return the tokenizer's type and files
     */
    public TokenizerSpec tokenizer() {
        return new TokenizerSpec(tokenizerType, vocabFile, mergeFile, tokenizerModel, eodToken, vocabSize);
    }

    /**
     * The dataset prefix written for one key, named as Megatron names it.
     *
     * @param key a JSON key
     * @return {@code <outputPrefix>_<key>_document}
     */
    public Path outputPrefix(String key) {
        return Path.of(outputPrefix + "_" + key + "_document");
    }
}
