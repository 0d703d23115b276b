package io.mcore4j.data.preprocess;

import io.mcore4j.data.tokenizer.ByteLevelTokenizer;
import io.mcore4j.data.tokenizer.Gpt2BpeTokenizer;
import io.mcore4j.data.tokenizer.NullTokenizer;
import io.mcore4j.data.tokenizer.Tokenizer;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * Which tokenizer to build and from which files, as Megatron-LM's tokenizer flags name them
 * ({@code --tokenizer-type}, {@code --vocab-file}, {@code --merge-file}, {@code --tokenizer-model},
 * {@code --vocab-size}) plus mcore4j's {@code --eod-token}. The constructor checks that each type has its
 * companion flags and no flag it would ignore; {@link #checkFiles()} checks that the named files exist;
 * {@link #open()} builds the tokenizer.
 *
 * @param type the tokenizer
 * @param vocabFile GPT-2's {@code vocab.json} (GPT2BPETokenizer only, else null)
 * @param mergeFile GPT-2's {@code merges.txt} (GPT2BPETokenizer only, else null)
 * @param tokenizerModel a {@code tokenizer.json} or a directory holding one (HuggingFaceTokenizer only, else null)
 * @param eodToken the end-of-document token's text (HuggingFaceTokenizer only; null for the tokenizer's own)
 * @param vocabSize Megatron's {@code --vocab-size}, the vocabulary before the end-of-document id (read by
 *     NullTokenizer only)
 */
public record TokenizerSpec(PreprocessOptions.TokenizerType type, Path vocabFile, Path mergeFile, Path tokenizerModel,
                            String eodToken, int vocabSize) {

    /** Validates the combination of flags. */
    public TokenizerSpec {
        if (type == null) {
            throw new IllegalArgumentException("--tokenizer-type is required");
        }
        String named = "--tokenizer-type " + type.argument();
        switch (type) {
            case GPT2_BPE -> {
                if (vocabFile == null) {
                    throw new IllegalArgumentException(named + " needs --vocab-file path/to/vocab.json");
                }
                if (mergeFile == null) {
                    throw new IllegalArgumentException(named + " needs --merge-file path/to/merges.txt");
                }
            }
            case HUGGING_FACE -> {
                if (tokenizerModel == null) {
                    throw new IllegalArgumentException(named + " needs --tokenizer-model path/to/tokenizer.json");
                }
            }
            case NULL -> {
                if (vocabSize < 1 || vocabSize == Integer.MAX_VALUE) {
                    throw new IllegalArgumentException(named + " needs --vocab-size of at least 1 (got " + vocabSize + ")");
                }
            }
            default -> { }
        }
        if (type != PreprocessOptions.TokenizerType.GPT2_BPE && (vocabFile != null || mergeFile != null)) {
            throw new IllegalArgumentException((vocabFile != null ? "--vocab-file " + vocabFile : "--merge-file " + mergeFile)
                    + " is read only by --tokenizer-type GPT2BPETokenizer, not by " + type.argument());
        }
        if (type != PreprocessOptions.TokenizerType.HUGGING_FACE && tokenizerModel != null) {
            throw new IllegalArgumentException("--tokenizer-model " + tokenizerModel
                    + " is read only by --tokenizer-type HuggingFaceTokenizer, not by " + type.argument());
        }
        if (type != PreprocessOptions.TokenizerType.HUGGING_FACE && eodToken != null) {
            throw new IllegalArgumentException("--eod-token " + eodToken
                    + " names a token of --tokenizer-type HuggingFaceTokenizer; " + type.argument() + " has a fixed one");
        }
    }

    /**
     * Checks that the named files are there.
     *
     * @throws IllegalArgumentException naming the flag and the path that is missing or of the wrong kind
     */
    public void checkFiles() {
        regularFile("--vocab-file", vocabFile);
        regularFile("--merge-file", mergeFile);
        if (tokenizerModel != null) {
            regularFile("--tokenizer-model", Files.isDirectory(tokenizerModel) ? tokenizerModel.resolve("tokenizer.json")
                    : tokenizerModel);
        }
    }

    private static void regularFile(String flag, Path file) {
        if (file == null) {
            return;
        }
        if (!Files.exists(file)) {
            throw new IllegalArgumentException(flag + " " + file + " does not exist");
        }
        if (!Files.isRegularFile(file) || !Files.isReadable(file)) {
            throw new IllegalArgumentException(flag + " " + file + " is not a readable file");
        }
    }

    /**
     * Builds the tokenizer; the caller owns it and closes it.
     *
     * @return a new tokenizer (the HuggingFace one holds native memory until closed)
     * @throws IOException if a file cannot be read
     * @throws IllegalArgumentException naming the file whose content is not what the type reads
     */
    public Tokenizer open() throws IOException {
        return switch (type) {
            case BYTE_LEVEL -> new ByteLevelTokenizer();
            case GPT2_BPE -> Gpt2BpeTokenizer.load(vocabFile, mergeFile);
            case HUGGING_FACE -> HuggingFaceTokenizerAdapter.load(tokenizerModel, eodToken);
            case NULL -> new NullTokenizer(vocabSize);
        };
    }

    /**
     * Whether one tokenizer may serve several threads (else each thread opens its own).
     *
     * @return true for the pure-Java tokenizers
     */
    public boolean threadSafe() {
        return type != PreprocessOptions.TokenizerType.HUGGING_FACE;
    }
}
