package io.mcore4j.samples.preprocess;

import io.mcore4j.data.preprocess.Preprocess;
import io.mcore4j.data.preprocess.PreprocessOptions;
import io.mcore4j.data.preprocess.PreprocessResult;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

import java.io.IOException;
import java.io.PrintStream;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * {@code preprocess}: tokenizes the string fields of a JSON Lines file into Megatron indexed datasets
 * ({@code <prefix>_<key>_document.bin/.idx}) through {@link Preprocess#run}. Flags are Megatron-LM's
 * {@code tools/preprocess_data.py} flags where it has them ({@code --input}, {@code --json-keys},
 * {@code --tokenizer-type}, {@code --tokenizer-model}, {@code --append-eod}, {@code --output-prefix},
 * {@code --workers}), plus mcore4j's own. Exit codes: 0 done, 1 the run failed (unreadable input, a bad line
 * under {@code --on-bad-line fail}), 2 bad flags or values (one line naming it, then how to get the usage).
 */
@Command(name = "preprocess", sortOptions = false,
        description = "Tokenizes a JSON Lines file into Megatron indexed datasets, one per --json-keys key.")
public final class PreprocessData {
    @Option(names = "--input", required = true, paramLabel = "FILE", description = "the JSON Lines file")
    Path input;

    @Option(names = "--output-prefix", required = true, paramLabel = "PREFIX",
            description = "writes PREFIX_<key>_document.bin/.idx for each key")
    Path outputPrefix;

    @Option(names = "--tokenizer-type", required = true, paramLabel = "TYPE", converter = TokenizerTypeConverter.class,
            description = "ByteLevel (UTF-8 bytes, no file) or HuggingFaceTokenizer (a tokenizer.json through DJL)")
    PreprocessOptions.TokenizerType tokenizerType;

    @Option(names = "--tokenizer-model", paramLabel = "FILE", description = "the tokenizer.json of HuggingFaceTokenizer")
    Path tokenizerModel;

    @Option(names = "--eod-token", paramLabel = "TEXT",
            description = "text of the end-of-document token (HuggingFaceTokenizer; default: a usual one such as <|endoftext|> or </s>)")
    String eodToken;

    @Option(names = "--json-keys", arity = "1..*", paramLabel = "KEY",
            description = "fields to tokenize, each into its own dataset (default: text)")
    List<String> jsonKeys = new ArrayList<>(PreprocessOptions.DEFAULT_JSON_KEYS);

    @Option(names = "--append-eod", description = "end each non-empty document with the end-of-document id")
    boolean appendEod;

    @Option(names = "--workers", paramLabel = "N", defaultValue = "" + PreprocessOptions.DEFAULT_WORKERS,
            description = "tokenizing threads; any count writes the same files (default: ${DEFAULT-VALUE})")
    int workers;

    @Option(names = "--on-bad-line", paramLabel = "skip|fail", defaultValue = "fail",
            description = "a line that is not valid UTF-8 or not a JSON object with every key as a string: skip it "
                    + "(reported with its number) or stop, leaving no files (default: ${DEFAULT-VALUE})")
    String onBadLine;

    @Option(names = "--batch-lines", paramLabel = "N", defaultValue = "" + PreprocessOptions.DEFAULT_BATCH_LINES,
            description = "lines handed to a worker at a time (default: ${DEFAULT-VALUE})")
    int batchLines;

    @Option(names = "--no-progress", description = "no progress bar (there is one only on an interactive terminal)")
    boolean noProgress;

    @Option(names = {"-h", "--help"}, usageHelp = true, description = "print this help and exit")
    boolean help;

    PreprocessData() {}

    /**
     * Runs the command and exits with its code.
     *
     * @param argv flags; {@code --help} lists them
     */
    public static void main(String[] argv) {
        System.exit(execute(argv, System.out, System.err));
    }

    /**
     * Parses the flags and runs without exiting the JVM.
     *
     * @param argv the flags
     * @param out where the usage and the result line go
     * @param err where errors, skipped-line reports and the progress bar go
     * @return 0 done, 1 the run failed, 2 bad flags or values
     */
    public static int execute(String[] argv, PrintStream out, PrintStream err) {
        PreprocessData command = new PreprocessData();
        CommandLine cmd = new CommandLine(command);
        PreprocessOptions options;
        try {
            cmd.parseArgs(argv);
            if (cmd.isUsageHelpRequested()) {
                cmd.usage(out);
                return 0;
            }
            options = command.options();
        } catch (CommandLine.ParameterException | IllegalArgumentException e) {
            // one line, as pretrain-gpt's: the flag, the value and what was expected, then where the flags are listed
            err.println("preprocess: " + String.valueOf(e.getMessage()).strip().replaceAll("\\s*\\R\\s*", " ")
                    + " ('preprocess --help' lists the flags)");
            return 2;
        }
        try {
            PreprocessResult r = Preprocess.run(options, err);
            out.printf(Locale.ROOT, "preprocess: %,d documents (%,d lines skipped), %,d tokens of %s, %.1f MB in %.1f s "
                            + "(%.1f MB/s): %s%n", r.documents(), r.skippedLines(), r.tokens(), r.dtype(),
                    r.inputBytes() / 1e6, r.seconds(), r.megabytesPerSecond(), r.outputs());
            return 0;
        } catch (IOException | RuntimeException e) {
            err.println("preprocess: " + e.getMessage());
            return 1;
        }
    }

    /** The library's settings from the parsed flags; throws IllegalArgumentException naming a bad value. */
    private PreprocessOptions options() {
        PreprocessOptions.BadLinePolicy policy = switch (onBadLine) {
            case "skip" -> PreprocessOptions.BadLinePolicy.SKIP;
            case "fail" -> PreprocessOptions.BadLinePolicy.FAIL;
            default -> throw new IllegalArgumentException("--on-bad-line " + onBadLine + " is unknown (expected skip or fail)");
        };
        return PreprocessOptions.builder(input, outputPrefix, tokenizerType).jsonKeys(jsonKeys).tokenizerModel(tokenizerModel)
                .eodToken(eodToken).appendEod(appendEod).workers(workers).onBadLine(policy).batchLines(batchLines)
                .progress(!noProgress).build();
    }

    /** {@code --tokenizer-type}'s spellings, as Megatron-LM writes them. */
    static final class TokenizerTypeConverter implements CommandLine.ITypeConverter<PreprocessOptions.TokenizerType> {
        @Override
        public PreprocessOptions.TokenizerType convert(String value) {
            try {
                return PreprocessOptions.TokenizerType.fromArgument(value);
            } catch (IllegalArgumentException e) {
                throw new CommandLine.TypeConversionException(e.getMessage());
            }
        }
    }
}
