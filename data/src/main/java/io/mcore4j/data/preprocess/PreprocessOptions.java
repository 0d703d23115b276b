package io.mcore4j.data.preprocess;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * Settings of one {@link Preprocess} run, parsed from Megatron-style command-line arguments by
 * {@link #parse(String...)}.
 *
 * @param input the JSON Lines file
 * @param jsonKeys fields to tokenize; each gets its own dataset
 * @param tokenizerType which tokenizer
 * @param tokenizerModel the {@code tokenizer.json} (HuggingFace tokenizer only, else null)
 * @param eodToken text of the end-of-document token (HuggingFace tokenizer only; null to look for a usual one)
 * @param appendEod whether to end each non-empty document with the end-of-document id
 * @param workers tokenizing threads
 * @param outputPrefix datasets are written to {@code <outputPrefix>_<key>_document.bin/.idx}
 * @param onBadLine what to do with a line that is not a JSON object with the keys as strings
 * @param batchLines lines handed to a worker at a time
 * @param progress whether to draw a progress bar on the console
 */
public record PreprocessOptions(Path input, List<String> jsonKeys, TokenizerType tokenizerType, Path tokenizerModel,
                                String eodToken, boolean appendEod, int workers, Path outputPrefix,
                                BadLinePolicy onBadLine, int batchLines, boolean progress) {

    /** The tokenizers {@code --tokenizer-type} accepts. */
    public enum TokenizerType {
        /** UTF-8 bytes as ids, needs no file ({@code ByteLevel}). */
        BYTE_LEVEL("ByteLevel"),
        /** A {@code tokenizer.json} through DJL ({@code HuggingFaceTokenizer}). */
        HUGGING_FACE("HuggingFaceTokenizer");

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

        static TokenizerType fromArgument(String value) {
            for (TokenizerType t : values()) {
                if (t.argument.equals(value)) {
                    return t;
                }
            }
            throw new IllegalArgumentException("--tokenizer-type " + value + " is unknown (expected ByteLevel or HuggingFaceTokenizer)");
        }
    }

    /** What happens to a malformed input line. */
    public enum BadLinePolicy {
        /** Report it with its line number and go on. */
        SKIP,
        /** Report it and stop; no output files are left behind. */
        FAIL
    }

    /** Usage text for the command line. */
    public static final String USAGE = String.join("\n",
            "usage: preprocess --input FILE.jsonl --output-prefix PREFIX --tokenizer-type ByteLevel|HuggingFaceTokenizer",
            "                  [--tokenizer-model tokenizer.json] [--eod-token TEXT] [--json-keys KEY...]",
            "                  [--append-eod] [--workers N] [--on-bad-line skip|fail] [--batch-lines N] [--no-progress]",
            "writes PREFIX_<key>_document.bin/.idx for each key (default key: text)");

    /** Validates the settings. */
    public PreprocessOptions {
        if (input == null || outputPrefix == null || tokenizerType == null || onBadLine == null) {
            throw new IllegalArgumentException("--input, --output-prefix and --tokenizer-type are required\n" + USAGE);
        }
        jsonKeys = List.copyOf(jsonKeys);
        if (jsonKeys.isEmpty() || jsonKeys.stream().anyMatch(String::isEmpty) || jsonKeys.stream().distinct().count() != jsonKeys.size()) {
            throw new IllegalArgumentException("--json-keys " + jsonKeys + " must be distinct, non-empty names");
        }
        if (tokenizerType == TokenizerType.HUGGING_FACE && tokenizerModel == null) {
            throw new IllegalArgumentException("--tokenizer-type HuggingFaceTokenizer needs --tokenizer-model path/to/tokenizer.json");
        }
        if (workers < 1) {
            throw new IllegalArgumentException("--workers " + workers + " must be at least 1");
        }
        if (batchLines < 1) {
            throw new IllegalArgumentException("--batch-lines " + batchLines + " must be at least 1");
        }
    }

    /**
     * Parses command-line arguments.
     *
     * @param args the arguments
     * @return the settings
     * @throws IllegalArgumentException naming the offending argument, with the usage text
     */
    public static PreprocessOptions parse(String... args) {
        Path input = null;
        Path outputPrefix = null;
        Path model = null;
        String eodToken = null;
        TokenizerType type = null;
        List<String> keys = new ArrayList<>();
        boolean appendEod = false;
        boolean progress = true;
        int workers = 1;
        int batchLines = 256;
        BadLinePolicy onBadLine = BadLinePolicy.FAIL;
        for (int k = 0; k < args.length; k++) {
            String a = args[k];
            switch (a) {
                case "--input" -> input = Path.of(value(args, k++));
                case "--output-prefix" -> outputPrefix = Path.of(value(args, k++));
                case "--tokenizer-type" -> type = TokenizerType.fromArgument(value(args, k++));
                case "--tokenizer-model" -> model = Path.of(value(args, k++));
                case "--eod-token" -> eodToken = value(args, k++);
                case "--append-eod" -> appendEod = true;
                case "--no-progress" -> progress = false;
                case "--workers" -> workers = intValue(a, value(args, k++));
                case "--batch-lines" -> batchLines = intValue(a, value(args, k++));
                case "--on-bad-line" -> {
                    String v = value(args, k++);
                    try {
                        onBadLine = BadLinePolicy.valueOf(v.toUpperCase(Locale.ROOT));
                    } catch (IllegalArgumentException e) {
                        throw new IllegalArgumentException("--on-bad-line " + v + " is unknown (expected skip or fail)", e);
                    }
                }
                case "--json-keys" -> {
                    value(args, k);
                    while (k + 1 < args.length && !args[k + 1].startsWith("--")) {
                        keys.add(args[++k]);
                    }
                }
                default -> throw new IllegalArgumentException("unknown argument " + a + "\n" + USAGE);
            }
        }
        return new PreprocessOptions(input, keys.isEmpty() ? List.of("text") : keys, type, model, eodToken, appendEod, workers,
                outputPrefix, onBadLine, batchLines, progress);
    }

    private static String value(String[] args, int k) {
        if (k + 1 >= args.length || args[k + 1].startsWith("--")) {
            throw new IllegalArgumentException(args[k] + " needs a value\n" + USAGE);
        }
        return args[k + 1];
    }

    private static int intValue(String name, String value) {
        try {
            return Integer.parseInt(value);
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(name + " " + value + " is not an integer", e);
        }
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
