package io.mcore4j.samples.preprocess;

import io.mcore4j.data.preprocess.Preprocess;
import io.mcore4j.data.preprocess.PreprocessOptions;
import io.mcore4j.data.preprocess.PreprocessResult;
import io.mcore4j.data.preprocess.TokenizerSpec;
import io.mcore4j.data.tokenizer.Tokenizer;
import io.mcore4j.samples.tokenizer.TokenizerOptions;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

import java.io.IOException;
import java.io.PrintStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * {@code preprocess}: tokenizes the string fields of a JSON Lines file into Megatron indexed datasets
 * ({@code <prefix>_<key>_document.bin/.idx}) through {@link Preprocess#run}. Flags are Megatron-LM's
 * {@code tools/preprocess_data.py} flags where it has them ({@code --input}, {@code --json-keys},
 * {@code --tokenizer-type}, {@code --vocab-file}, {@code --merge-file}, {@code --tokenizer-model},
 * {@code --vocab-size}, {@code --append-eod}, {@code --output-prefix}, {@code --workers}), plus mcore4j's own;
 * the tokenizer flags are {@link TokenizerOptions}, shared with {@code pretrain-gpt}. Exit codes: 0 done, 1 the run failed (unreadable input, a bad line
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

    @Mixin
    final TokenizerOptions tokenizer = new TokenizerOptions();

    @Option(names = "--vocab-size", paramLabel = "N", defaultValue = "" + PreprocessOptions.DEFAULT_VOCAB_SIZE,
            description = "NullTokenizer: ids are below N and N is the end of document (default: ${DEFAULT-VALUE}, as Megatron's)")
    int vocabSize;

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
            command.checkPaths();
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
        TokenizerSpec spec = tokenizer.spec(vocabSize);
        // a tokenizer file that does not read is a bad flag value (exit 2), found before any output is created
        try (Tokenizer probe = spec.open()) {
            probe.vocabularySize();
        } catch (IOException e) {
            throw new IllegalArgumentException("--tokenizer-type " + spec.type().argument() + ": cannot read " + e.getMessage(), e);
        }
        return PreprocessOptions.builder(input, outputPrefix, spec.type()).jsonKeys(jsonKeys)
                .tokenizerModel(spec.tokenizerModel()).gpt2Files(spec.vocabFile(), spec.mergeFile()).vocabSize(spec.vocabSize())
                .eodToken(spec.eodToken()).appendEod(appendEod).workers(workers).onBadLine(policy).batchLines(batchLines)
                .progress(!noProgress).build();
    }

    /** The input files must exist and the output prefix's directory must be one, before anything is read. */
    private void checkPaths() {
        if (!Files.isRegularFile(input)) {
            throw new IllegalArgumentException("--input " + input + (Files.isDirectory(input) ? " is a directory"
                    : " does not exist") + "; expected a JSON Lines file");
        }
        Path parent = outputPrefix.toAbsolutePath().getParent();
        if (parent != null && !Files.isDirectory(parent)) {
            throw new IllegalArgumentException("--output-prefix " + outputPrefix + ": " + parent + (Files.exists(parent)
                    ? " is a file" : " does not exist") + "; expected the directory of the output files");
        }
    }
}
