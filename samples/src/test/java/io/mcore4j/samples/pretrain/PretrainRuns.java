package io.mcore4j.samples.pretrain;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/** pretrain-gpt run as a user runs it, for the tests that compare its losses or read its refusals. */
final class PretrainRuns {
    private PretrainRuns() {}

    /** Trains with these flags, its output discarded; returns the logged losses. */
    static List<Double> train(List<String> flags) throws Exception {
        PrintStream quiet = new PrintStream(new ByteArrayOutputStream(), true, StandardCharsets.UTF_8);
        return PretrainGpt.run(PretrainArgs.parse(flags.toArray(String[]::new)), quiet);
    }

    /** Asserts the same number of losses, each within 1e-5 of the expected one, relatively. */
    static void assertSameLosses(List<Double> expected, List<Double> actual, String layout) {
        assertEquals(expected.size(), actual.size(), layout);
        for (int i = 0; i < expected.size(); i++) {
            double rel = Math.abs(actual.get(i) - expected.get(i)) / Math.abs(expected.get(i));
            assertTrue(rel <= 1e-5, layout + " step " + (i + 1) + ": " + actual.get(i) + " vs " + expected.get(i)
                    + " (relative " + rel + ")");
        }
    }

    /**
     * The one line (without its help suffix) with which pretrain-gpt refuses a one-layer model's flags,
     * exit code 2, before anything runs.
     */
    static String refusal(String... flags) {
        List<String> argv = new ArrayList<>(List.of("--num-layers", "1", "--hidden-size", "16", "--num-attention-heads", "2"));
        argv.addAll(List.of(flags));
        return refusal(argv);
    }

    /** The one line (without its help suffix) with which pretrain-gpt refuses {@code argv}, exit code 2, before anything runs. */
    static String refusal(List<String> argv) {
        String line = refused(argv, (a, o) -> {
            throw new AssertionError("ran");
        });
        String suffix = " ('pretrain-gpt --help' lists the flags)";
        assertTrue(line.endsWith(suffix), line);
        return line.substring(0, line.length() - suffix.length());
    }

    /** The one line with which pretrain-gpt stops, exit code 2, on bad input it finds while running (a data line). */
    static String runRefusal(List<String> flags) {
        return refused(flags, (a, o) -> PretrainGpt.run(a, o));
    }

    private static String refused(List<String> argv, PretrainGpt.Job job) {
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        int code = PretrainGpt.execute("pretrain-gpt", argv.toArray(String[]::new),
                new PrintStream(new ByteArrayOutputStream(), true, StandardCharsets.UTF_8),
                new PrintStream(err, true, StandardCharsets.UTF_8), job);
        String text = err.toString(StandardCharsets.UTF_8);
        assertEquals(2, code, text);
        assertEquals(1, text.lines().count(), text);
        return text.lines().findFirst().orElseThrow();
    }
}
