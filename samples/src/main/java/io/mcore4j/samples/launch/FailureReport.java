package io.mcore4j.samples.launch;

import io.mcore4j.checkpoint.CheckpointException;
import io.mcore4j.data.indexed.CorruptDatasetException;
import io.mcore4j.hf.HfCheckpointException;
import picocli.CommandLine;

import java.io.IOException;
import java.io.PrintStream;
import java.io.PrintWriter;
import java.io.UncheckedIOException;
import java.util.Locale;
import java.util.concurrent.TimeoutException;

/**
 * How the command-line front-ends ({@code pretrain-gpt}, {@code gpt-benchmark}, {@code plan},
 * {@code generate-gpt}, {@code convert-hf}, {@code export-hf}) report a failure: one line, and an
 * exit status. Bad input is exit 2: an {@link IllegalArgumentException} anywhere in the cause chain
 * (ranks wrap what they throw), whose message names the flag, or a corrupt dataset. Anything else is
 * a failed run, exit 1, named with each distinct message of its cause chain. No stack trace follows
 * unless asked for with {@code -Dmcore4j.stacktrace=true} (in {@code MCORE4J_JAVA_OPTS} for the
 * {@code mcore4j} script); a failure that no input or resource explains (not an I/O, checkpoint,
 * Hugging Face, timeout or memory failure), that is, a bug to report, says so on its line.
 */
public final class FailureReport {
    /** The system property that adds the stack trace after a failure's line. */
    public static final String STACK_TRACE_PROPERTY = "mcore4j.stacktrace";

    private FailureReport() {}

    /**
     * @param name the command's name, which starts the line
     * @param e the failure
     * @param err where the line goes
     * @return the exit status: 2 for bad input, 1 for a failed run
     */
    public static int report(String name, Throwable e, PrintStream err) {
        PrintWriter writer = new PrintWriter(err, true);
        int status = report(name, e, writer);
        writer.flush();
        return status;
    }

    /**
     * @param name the command's name, which starts the line
     * @param e the failure
     * @param err where the line goes
     * @return the exit status: 2 for bad input, 1 for a failed run
     */
    public static int report(String name, Throwable e, PrintWriter err) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (t instanceof IllegalArgumentException || t instanceof CorruptDatasetException) {
                err.println(name + ": " + oneLine(t.getMessage()));
                return 2;
            }
        }
        String hint = e instanceof OutOfMemoryError ? String.format(Locale.ROOT, " (this JVM's heap is %.3g GB: raise -Xmx,"
                + " or use smaller model flags)", Runtime.getRuntime().maxMemory() / 1e9) : "";
        err.println(name + " failed: " + causes(e) + hint + (explained(e) ? ""
                : " (unexpected: -D" + STACK_TRACE_PROPERTY + "=true prints the stack trace to report)"));
        if (Boolean.getBoolean(STACK_TRACE_PROPERTY)) {
            e.printStackTrace(err);
        }
        return 1;
    }

    /**
     * A picocli handler for a command's {@code call()}: failures are reported as above.
     *
     * @param name the command's name
     * @return the handler
     */
    public static CommandLine.IExecutionExceptionHandler handler(String name) {
        return (e, commandLine, parseResult) -> report(name, e, commandLine.getErr());
    }

    /**
     * @param text a message, possibly over several lines (or null)
     * @return the message on one line
     */
    public static String oneLine(String text) {
        return text == null ? "" : text.replaceAll("\\s*\\R\\s*", " ");
    }

    /** @return each distinct message of the cause chain, outermost first, on one line */
    private static String causes(Throwable e) {
        StringBuilder text = new StringBuilder();
        for (Throwable t = e; t != null; t = t.getCause()) {
            String message = t.getMessage() == null ? t.getClass().getSimpleName()
                    : t instanceof IOException || t instanceof Error ? t.getClass().getSimpleName() + ": " + t.getMessage()
                    : t.getMessage();
            Throwable cause = t.getCause();
            if (cause != null && cause.getMessage() != null) {
                // a wrapper quoting its cause as "pkg.SomeException: message" (a rank's failure) keeps the message alone
                message = message.replace(cause.toString(), cause.getMessage());
            }
            if (!text.toString().contains(message)) {
                text.append(text.length() == 0 ? "" : ": ").append(message);
            }
        }
        return oneLine(text.toString());
    }

    /** @return whether the failure comes from the file system, a checkpoint, a Hugging Face directory, a timeout or memory */
    private static boolean explained(Throwable e) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (t instanceof IOException || t instanceof UncheckedIOException || t instanceof CheckpointException
                    || t instanceof HfCheckpointException || t instanceof OutOfMemoryError || t instanceof TimeoutException) {
                return true;
            }
        }
        return false;
    }
}
