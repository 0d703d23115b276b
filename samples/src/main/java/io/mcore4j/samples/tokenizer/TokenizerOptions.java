package io.mcore4j.samples.tokenizer;

import io.mcore4j.data.preprocess.PreprocessOptions.TokenizerType;
import io.mcore4j.data.preprocess.TokenizerSpec;
import picocli.CommandLine;
import picocli.CommandLine.Option;

import java.nio.file.Path;

/**
 * The tokenizer flags of Megatron-LM, as a picocli mixin: {@code --tokenizer-type} with Megatron's spellings
 * ({@code GPT2BPETokenizer}, {@code HuggingFaceTokenizer}, {@code NullTokenizer}) and mcore4j's
 * {@code ByteLevel}, and the files each type reads. Megatron's {@code --vocab-size}, which NullTokenizer reads,
 * stays with each command (its default differs between Megatron's preprocessing and training), so
 * {@link #spec(int)} takes it. Validation raises {@link IllegalArgumentException} with one line naming the
 * flag, the value and what was expected.
 */
public final class TokenizerOptions {
    @Option(names = "--tokenizer-type", paramLabel = "TYPE", converter = TypeConverter.class,
            description = "GPT2BPETokenizer (GPT-2's byte-level BPE from --vocab-file and --merge-file; end of document"
                    + " <|endoftext|>), HuggingFaceTokenizer (a tokenizer.json, --tokenizer-model, through DJL; end of"
                    + " document its eos_token), NullTokenizer (texts of space-separated ids below --vocab-size; end of"
                    + " document --vocab-size) or ByteLevel (mcore4j's: UTF-8 bytes, no file; end of document 256)")
    TokenizerType type;

    @Option(names = "--vocab-file", paramLabel = "FILE", description = "GPT2BPETokenizer: GPT-2's vocab.json (token to id)")
    Path vocabFile;

    @Option(names = "--merge-file", paramLabel = "FILE", description = "GPT2BPETokenizer: GPT-2's merges.txt (BPE merges)")
    Path mergeFile;

    @Option(names = "--tokenizer-model", paramLabel = "PATH",
            description = "HuggingFaceTokenizer: a tokenizer.json, or a directory holding one (and, if present, the"
                    + " tokenizer_config.json whose eos_token is the end of document); read offline")
    Path tokenizerModel;

    @Option(names = "--eod-token", paramLabel = "TEXT",
            description = "HuggingFaceTokenizer: text of the end-of-document token (default: the eos_token of"
                    + " tokenizer_config.json, else a usual one such as <|endoftext|> or </s>)")
    String eodToken;

    /** @return {@code --tokenizer-type}, or null when not given */
    public TokenizerType type() {
        return type;
    }

    /**
     * The tokenizer these flags name, its files checked.
     *
     * @param vocabSize the command's {@code --vocab-size} (read by NullTokenizer only)
     * @return the tokenizer's type and files
     * @throws IllegalArgumentException naming {@code --tokenizer-type} when it is missing, a companion flag the
     *     type needs, a flag the type would not read, or a file that does not exist
     */
    public TokenizerSpec spec(int vocabSize) {
        TokenizerSpec spec = new TokenizerSpec(type, vocabFile, mergeFile, tokenizerModel, eodToken, vocabSize);
        spec.checkFiles();
        return spec;
    }

    /** {@code --tokenizer-type}'s spellings, as Megatron-LM writes them. */
    static final class TypeConverter implements CommandLine.ITypeConverter<TokenizerType> {
        @Override
        public TokenizerType convert(String value) {
            try {
                return TokenizerType.fromArgument(value);
            } catch (IllegalArgumentException e) {
                throw new CommandLine.TypeConversionException(e.getMessage());
            }
        }
    }
}
