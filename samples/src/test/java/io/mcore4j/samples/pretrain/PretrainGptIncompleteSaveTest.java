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
 * Reliability (issue 40, item 3): a save killed during the first checkpoint leaves only
 * {@code D/iter_0000001.saving} (no mcore4j_metadata.json, no {@code latest}). Before the fix the rerun, with
 * {@code --load D --save D} or {@code --save D}, exited 2 ("--save D already holds checkpoints of
 * another run"): the save-directory check counted the leftover as a checkpoint. Now the rerun names
 * the leftover in one line, trains from scratch (or resumes from the newest complete checkpoint), and
 * its own save of iteration 1 succeeds; complete checkpoints of another run are still refused.
 */
class PretrainGptIncompleteSaveTest {
    @TempDir
    Path dir;

    private record Run(int code, String out, String err) {}

    private static Run run(String... more) {
        List<String> argv = new ArrayList<>(List.of("--mock-data", "--num-layers", "1", "--hidden-size", "32",
                "--num-attention-heads", "4", "--seq-length", "16", "--micro-batch-size", "1", "--global-batch-size", "1",
                "--vocab-size", "64", "--make-vocab-size-divisible-by", "8", "--log-interval", "1", "--lr-decay-iters", "4"));
        argv.addAll(List.of(more));
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        int code = PretrainGpt.execute("pretrain-gpt", argv.toArray(String[]::new), new PrintStream(out, true, StandardCharsets.UTF_8),
                new PrintStream(err, true, StandardCharsets.UTF_8), (args, o) -> {
                    PretrainGpt.run(args, o);
                });
        return new Run(code, out.toString(StandardCharsets.UTF_8), err.toString(StandardCharsets.UTF_8));
    }

    /** What a kill during the first save leaves: the staging directory with a partial shard file, no marker. */
    private static Path killedFirstSave(Path save) throws IOException {
        Path staging = Files.createDirectories(save.resolve("iter_0000001.saving"));
        Files.write(staging.resolve("__0_0.distcp"), new byte[100]);
        return staging;
    }

    private static void assertSavedIterationOne(Path save, Run r) throws IOException {
        assertEquals(0, r.code(), r.err());
        assertTrue(Files.isRegularFile(save.resolve("iter_0000001").resolve("mcore4j_metadata.json")), "iteration 1 saved: " + r.out());
        assertEquals("1", Files.readString(save.resolve("latest")).trim());
        assertFalse(Files.exists(save.resolve("iter_0000001.saving")), "the leftover is gone after the save");
    }

    @Test
    void aRerunWithLoadAndSaveOnTheDirectoryTrainsFromScratch() throws IOException {
        Path save = dir.resolve("d");
        Path staging = killedFirstSave(save);
        Run r = run("--train-iters", "1", "--load", save.toString(), "--save", save.toString());
        assertTrue(r.out().contains("ignoring incomplete save " + staging + " (no mcore4j_metadata.json); training from scratch\n"),
                r.out() + r.err());
        assertSavedIterationOne(save, r);
        // and the next run resumes from that checkpoint
        Run resumed = run("--train-iters", "2", "--load", save.toString(), "--save", save.toString());
        assertEquals(0, resumed.code(), resumed.err());
        assertTrue(resumed.out().contains("resumed from " + save + " at iteration 1"), resumed.out());
    }

    @Test
    void aRerunWithOnlySaveTrainsFromScratch() throws IOException {
        Path save = dir.resolve("d");
        Path staging = killedFirstSave(save);
        Run r = run("--train-iters", "1", "--save", save.toString());
        assertTrue(r.out().contains("ignoring incomplete save " + staging + " (no mcore4j_metadata.json); training from scratch\n"),
                r.out() + r.err());
        assertSavedIterationOne(save, r);
    }

    @Test
    void aLeftoverAfterACompleteCheckpointIsIgnoredOnResume() throws IOException {
        Path save = dir.resolve("d");
        assertEquals(0, run("--train-iters", "1", "--save", save.toString()).code());
        Path staging = Files.createDirectories(save.resolve("iter_0000002.saving")); // killed while saving iteration 2
        Run r = run("--train-iters", "2", "--load", save.toString(), "--save", save.toString());
        assertEquals(0, r.code(), r.err());
        assertTrue(r.out().contains("ignoring incomplete save " + staging + " (no mcore4j_metadata.json); resuming from iteration 1\n"),
                r.out());
        assertTrue(Files.isRegularFile(save.resolve("iter_0000002").resolve("mcore4j_metadata.json")));
        assertFalse(Files.exists(staging));
    }

    @Test
    void completeCheckpointsOfAnotherRunAreStillRefused() throws IOException {
        Path save = dir.resolve("d");
        assertEquals(0, run("--train-iters", "1", "--save", save.toString()).code());
        killedFirstSave(save.resolve("unrelated")); // not an iteration directory of this root
        Files.delete(save.resolve("latest")); // a complete iteration directory without the marker is a checkpoint too
        Run r = run("--train-iters", "1", "--save", save.toString());
        assertEquals(2, r.code(), r.out() + r.err());
        assertTrue(r.err().startsWith("pretrain-gpt: --save " + save + " already holds checkpoints (latest iteration 1) of"
                + " another run; pass --load " + save), r.err());
        // and a leftover alone is no checkpoint to resume: --exit-on-missing-checkpoint names it
        Path other = dir.resolve("only-leftover");
        Path staging = killedFirstSave(other);
        Run exitOnMissing = run("--train-iters", "1", "--load", other.toString(), "--exit-on-missing-checkpoint");
        assertEquals(2, exitOnMissing.code(), exitOnMissing.err());
        assertTrue(exitOnMissing.err().startsWith("pretrain-gpt: --load " + other + " holds no complete checkpoint (only the"
                + " incomplete save " + staging + ") (--exit-on-missing-checkpoint)"), exitOnMissing.err());
    }
}
