package io.mcore4j.samples.cli;

import java.io.PrintStream;
import java.util.Objects;

/**
 * One command of {@link Mcore4jCli}: its name on the command line, the line {@code mcore4j --help}
 * shows for it, and what runs it.
 *
 * @param name the word after {@code mcore4j}, e.g. {@code pretrain-gpt}
 * @param summary one line for the command list
 * @param entry runs the command on the flags that follow its name
 */
public record Subcommand(String name, String summary, Entry entry) {
    /** Validates the fields. */
    public Subcommand {
        Objects.requireNonNull(entry, "entry");
        if (name == null || !name.matches("[a-z][a-z0-9-]*")) {
            throw new IllegalArgumentException("subcommand name " + name + " is not a lower-case word (expected e.g. pretrain-gpt)");
        }
        if (summary == null || summary.isBlank() || summary.contains("\n")) {
            throw new IllegalArgumentException("summary of " + name + " must be one non-empty line, got " + summary);
        }
    }

    /** A command's body: flags in, exit code out, without exiting the JVM. */
    @FunctionalInterface
    public interface Entry {
        /**
         * @param argv the flags after the command's name
         * @param out standard output
         * @param err standard error: errors, one line each
         * @return the exit code: 0 done, 2 bad flags or values, 1 a failed run
         */
        int run(String[] argv, PrintStream out, PrintStream err);
    }
}
