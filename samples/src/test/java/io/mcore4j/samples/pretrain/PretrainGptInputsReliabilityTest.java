package io.mcore4j.samples.pretrain;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Reliability (issue 40, item 7): pretrain-gpt's inputs as an operator gets them wrong. Each bad path
 * or value ends in exit 2 and one line that starts with the command and names the flag and the value,
 * before training starts and without a stack trace. Before the fix these ended in stack traces (a
 * missing --data-path, --corpus-from-sources, --load-hf or --auto-layout-cluster, a --load that is a
 * file, a --save or --metrics-dir that cannot be written, found only after training had started), an
 * OutOfMemoryError (--hidden-size 1048576), an ArithmeticException (--distributed-timeout-minutes
 * Infinity), or messages naming no flag (a huge --seq-length, a timeout of 1e-9 minutes).
 */
class PretrainGptInputsReliabilityTest {
    @TempDir
    Path dir;

    /** A one-iteration job small enough to finish in a second if a check is missing. */
    private static List<String> tiny(String... more) {
        List<String> argv = new ArrayList<>(List.of("--num-layers", "1", "--hidden-size", "32", "--num-attention-heads", "4",
                "--seq-length", "16", "--micro-batch-size", "1", "--global-batch-size", "1", "--train-iters", "1",
                "--vocab-size", "64", "--make-vocab-size-divisible-by", "8", "--log-interval", "1"));
        argv.addAll(List.of(more));
        return argv;
    }

    /** Runs pretrain-gpt in this JVM; asserts exit 2, no training, and one line holding {@code expected}. */
    private void refused(List<String> argv, String expected) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        int code;
        try {
            code = PretrainGpt.execute("pretrain-gpt", argv.toArray(String[]::new), new PrintStream(out, true, StandardCharsets.UTF_8),
                    new PrintStream(err, true, StandardCharsets.UTF_8), (args, o) -> {
                        PretrainGpt.run(args, o);
                    });
        } catch (Throwable t) {
            throw new AssertionError(argv + " escaped pretrain-gpt's exit codes: " + t, t);
        }
        String text = err.toString(StandardCharsets.UTF_8);
        String first = text.lines().findFirst().orElse("");
        assertEquals(2, code, argv + ": " + text);
        assertTrue(first.startsWith("pretrain-gpt: ") && first.contains(expected), argv + "\n expected: " + expected
                + "\n got: " + text);
        assertFalse(text.contains("\tat "), "no stack trace: " + text);
        assertTrue(text.lines().count() <= 2, "one line, and the usage hint at most: " + text);
        assertFalse(out.toString(StandardCharsets.UTF_8).contains("training:"), "refused before training: " + out);
    }

    @Test
    void missingDatasetFilesNameTheDataPath() throws IOException {
        Path missing = dir.resolve("missing_text_document");
        refused(tiny("--data-path", missing.toString()), "--data-path " + missing + ": " + missing + ".bin does not exist");
        // the .bin exists, its .idx not; and the second prefix of a weighted blend
        Files.write(Path.of(missing + ".bin"), new byte[16]);
        refused(tiny("--data-path", missing.toString()), missing + ".idx does not exist");
        Path other = dir.resolve("other_text_document");
        Files.write(Path.of(missing + ".idx"), new byte[16]);
        refused(tiny("--data-path", "0.7", missing.toString(), "0.3", other.toString()), "--data-path " + other + ": ");
        refused(tiny("--data-path", "0.7", missing.toString(), "0.3"), "--data-path 0.7 " + missing + " 0.3: ");
    }

    @Test
    void missingOrEmptySourceTreeNamesTheCorpusFlag() throws IOException {
        Path none = dir.resolve("no-sources");
        refused(tiny("--corpus-from-sources", none.toString()), "--corpus-from-sources " + none + " does not exist");
        Path file = Files.writeString(dir.resolve("a-source-file.java"), "class A {}");
        refused(tiny("--corpus-from-sources", file.toString()), "--corpus-from-sources " + file + " is a file");
        Path empty = Files.createDirectories(dir.resolve("empty-sources"));
        refused(tiny("--corpus-from-sources", empty.toString()), "--corpus-from-sources " + empty + " holds no .md or .java files");
    }

    @Test
    void checkpointPathsThatAreFilesOrUnwritableAreRefusedUpFront() throws IOException {
        Path file = Files.writeString(dir.resolve("a-file"), "not a directory");
        refused(tiny("--mock-data", "--load", file.toString()), "--load " + file + " is a file");
        refused(tiny("--mock-data", "--save", file.toString()), "--save " + file + " is a file");
        // a directory that cannot be created (its parent is a file) is found before training, not at the first save
        Path under = file.resolve("ckpt");
        refused(tiny("--mock-data", "--save", under.toString()), "--save " + under + ": " + file + " is a file");
        refused(tiny("--mock-data", "--metrics-dir", under.toString()), "--metrics-dir " + under + ": " + file + " is a file");
        refused(tiny("--mock-data", "--metrics-dir", file.toString()), "--metrics-dir " + file + " is a file");
        refused(tiny("--mock-data", "--tensorboard-dir", file.toString()), "--tensorboard-dir " + file + " is a file");
        refused(tiny("--mock-data", "--save-hf", under.toString()), "--save-hf " + under + ": " + file + " is a file");
    }

    @Test
    void missingHuggingFaceAndClusterFilesNameTheirFlags() throws IOException {
        Path hf = dir.resolve("no-hf");
        refused(tiny("--mock-data", "--load-hf", hf.toString()), "--load-hf " + hf + " does not exist");
        Path hfEmpty = Files.createDirectories(dir.resolve("hf-without-config"));
        refused(tiny("--mock-data", "--load-hf", hfEmpty.toString()), "--load-hf " + hfEmpty + " has no config.json");
        Path hfBad = Files.createDirectories(dir.resolve("hf-bad-config"));
        Files.writeString(hfBad.resolve("config.json"), "{not json");
        refused(tiny("--mock-data", "--load-hf", hfBad.toString()), "--load-hf " + hfBad + ": ");
        Path cluster = dir.resolve("no-cluster.json");
        refused(tiny("--mock-data", "--auto-layout", "--auto-layout-cluster", cluster.toString()),
                "--auto-layout-cluster " + cluster + " does not exist");
        Path badCluster = Files.writeString(dir.resolve("bad-cluster.json"), "{\"gpusPerNode\": ");
        refused(tiny("--mock-data", "--auto-layout", "--auto-layout-cluster", badCluster.toString()),
                "--auto-layout-cluster " + badCluster + ": ");
    }

    @Test
    void timeoutsOutsideTheirRangeNameTheFlag() {
        for (String value : List.of("Infinity", "1e-9", "1e300")) {
            refused(tiny("--mock-data", "--distributed-timeout-minutes", value), "--distributed-timeout-minutes "
                    + Double.parseDouble(value) + " must be a number of minutes from 0.001");
        }
    }

    @Test
    void modelsAndSequencesTooLargeForThisMachineAreRefusedNamingTheFlag() {
        refused(tiny("--mock-data", "--hidden-size", "1048576"), "--hidden-size 1048576");
        refused(tiny("--mock-data", "--num-layers", "1000000"), "--num-layers 1000000");
        refused(tiny("--mock-data", "--ffn-hidden-size", "2147483647"), "--ffn-hidden-size 2147483647");
        refused(tiny("--mock-data", "--vocab-size", "2147483647"), "--vocab-size 2147483647");
        refused(tiny("--mock-data", "--make-vocab-size-divisible-by", "2000000000"), "--make-vocab-size-divisible-by 2000000000");
        // learned positions: the position table; rotary: the activations of the sequence
        refused(tiny("--mock-data", "--seq-length", "2147483647"), "--seq-length 2147483647");
        refused(tiny("--mock-data", "--seq-length", "2147483647", "--position-embedding-type", "rope"),
                "--seq-length 2147483647 with --micro-batch-size 1");
    }

    @Test
    void nonFiniteAndOutOfRangeNumbersNameTheFlag() {
        String[][] cases = {
            {"--lr", "NaN"}, {"--lr", "-1"}, {"--lr", "Infinity"}, {"--min-lr", "NaN"}, {"--weight-decay", "NaN"},
            {"--clip-grad", "-1"}, {"--adam-beta1", "1"}, {"--adam-beta2", "NaN"}, {"--adam-eps", "0"},
            {"--hidden-dropout", "1.5"}, {"--attention-dropout", "-0.1"}, {"--peak-tflops", "Infinity"},
            {"--save-interval", "-1"}, {"--eval-interval", "-1"}, {"--ddp-bucket-size", "0"}, {"--split", "abc"},
            {"--num-experts", "4", "--moe-router-topk", "5"}, {"--moe-layer-freq", "0"},
            {"--eval-interval", "1", "--eval-iters", "2147483647"},
        };
        for (String[] c : cases) {
            List<String> argv = tiny("--mock-data");
            argv.addAll(List.of(c));
            String flag = c[c.length - 2];
            refused(argv, flag + " " + (flag.equals("--split") || flag.startsWith("--moe") || flag.endsWith("-interval")
                    || flag.equals("--ddp-bucket-size") || flag.equals("--eval-iters") ? c[c.length - 1] : String.valueOf(Double.parseDouble(c[c.length - 1]))));
        }
    }
}
