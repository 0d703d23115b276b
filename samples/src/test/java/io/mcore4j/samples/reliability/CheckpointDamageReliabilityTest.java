package io.mcore4j.samples.reliability;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.checkpoint.json.Json;
import io.mcore4j.samples.pretrain.PretrainArgs;
import io.mcore4j.samples.pretrain.PretrainGpt;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A pretrain-gpt checkpoint whose metadata lost one shard entry, of a model tensor, an fp32 master
 * or an Adam moment (sharded over data-parallel ranks by the distributed optimizer), never resumes:
 * the run fails before its first iteration, naming the metadata file, the tensor and the missing
 * range, at the layout it was saved at and at another one. Before the load checked coverage such a
 * run resumed with exit 0 and different losses.
 */
class CheckpointDamageReliabilityTest {
    @TempDir
    static Path dir;
    private static Path checkpoint;
    private static String intact;

    private static List<String> flags(int tp, int iterations, String... more) {
        List<String> f = new ArrayList<>(List.of("--nproc", "4", "--tensor-model-parallel-size", String.valueOf(tp),
                "--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4", "--seq-length", "16",
                "--micro-batch-size", "1", "--global-batch-size", String.valueOf(8 / tp), "--lr", "1e-3",
                "--train-iters", String.valueOf(iterations), "--lr-decay-iters", "2", "--mock-data", "--vocab-size", "250",
                "--make-vocab-size-divisible-by", "64", "--log-interval", "1", "--seed", "5",
                "--use-distributed-optimizer", "--metrics-dir", dir.resolve("metrics-" + System.nanoTime()).toString()));
        f.addAll(List.of(more));
        return f;
    }

    private static List<Double> train(List<String> flags) throws Exception {
        PrintStream quiet = new PrintStream(new ByteArrayOutputStream(), true, StandardCharsets.UTF_8);
        return PretrainGpt.run(PretrainArgs.parse(flags.toArray(String[]::new)), quiet);
    }

    @BeforeAll
    static void saveTwoIterationsAtTp2Dp2() throws Exception {
        Path save = dir.resolve("ckpt");
        train(flags(2, 2, "--save", save.toString()));
        try (Stream<Path> s = Files.list(save)) {
            checkpoint = s.filter(p -> p.getFileName().toString().startsWith("iter_")).findFirst().orElseThrow()
                    .resolve("mcore4j_metadata.json");
        }
        intact = Files.readString(checkpoint);
    }

    /** The first key with this prefix and suffix stored in more than one shard. */
    @SuppressWarnings("unchecked")
    private static String shardedKey(Map<String, Object> tensors, String prefix, String suffix) {
        for (Map.Entry<String, Object> e : tensors.entrySet()) {
            List<Object> shards = (List<Object>) ((Map<String, Object>) e.getValue()).get("shards");
            if (e.getKey().startsWith(prefix) && e.getKey().endsWith(suffix) && shards.size() > 1) {
                return e.getKey();
            }
        }
        throw new AssertionError("no " + prefix + "*" + suffix + " key in more than one shard: " + tensors.keySet());
    }

    @Test
    @SuppressWarnings("unchecked")
    void aCheckpointMissingOneShardEntryNeverResumes() throws Exception {
        Map<String, Object> root = (Map<String, Object>) Json.parse(intact);
        Map<String, Object> tensors = (Map<String, Object>) root.get("tensors");
        List<String> keys = List.of(shardedKey(tensors, "model.", ".weight"),
                shardedKey(tensors, "optimizer.", ".fp32_param"), shardedKey(tensors, "optimizer.", ".exp_avg_sq"));
        for (String key : keys) {
            Map<String, Object> damaged = (Map<String, Object>) Json.parse(intact);
            Map<String, Object> tensor = (Map<String, Object>) ((Map<String, Object>) damaged.get("tensors")).get(key);
            ((List<Object>) tensor.get("shards")).remove(1);
            Files.writeString(checkpoint, Json.writePretty(damaged));
            try {
                for (int tp : new int[] {2, 1}) {
                    Exception e = assertThrows(Exception.class, () -> train(flags(tp, 3, "--load",
                            checkpoint.getParent().getParent().toString())), key + " at TP" + tp + " resumed");
                    String message = messages(e);
                    for (String w : List.of(checkpoint.toString(), key, "lie in no shard")) {
                        assertTrue(message.contains(w), key + " at TP" + tp + ": no \"" + w + "\" in " + message);
                    }
                }
            } finally {
                Files.writeString(checkpoint, intact);
            }
        }
        // the intact checkpoint resumes (at the other layout too)
        assertEquals(1, train(flags(1, 3, "--load", checkpoint.getParent().getParent().toString())).size());
    }

    @Test
    void aLatestMarkerHoldingGarbageFailsInOneLineNamingIt() throws IOException {
        Path root = checkpoint.getParent().getParent();
        Path marker = root.resolve("latest");
        String kept = Files.readString(marker);
        try {
            for (String text : List.of("abc", "", "-3", "99999999999999999999")) {
                Files.writeString(marker, text);
                ByteArrayOutputStream err = new ByteArrayOutputStream();
                List<String> argv = flags(2, 3, "--load", root.toString());
                int code = PretrainGpt.execute("pretrain-gpt", new PretrainArgs(), null, List.of(),
                        argv.toArray(String[]::new), new PrintStream(new ByteArrayOutputStream(), true, StandardCharsets.UTF_8),
                        new PrintStream(err, true, StandardCharsets.UTF_8), (a, o) -> PretrainGpt.run(a, o));
                String printed = err.toString(StandardCharsets.UTF_8);
                assertEquals(1, code, "\"" + text + "\": " + printed);
                assertEquals(1, printed.lines().count(), "\"" + text + "\": one line, no stack trace: " + printed);
                String holds = text.equals("-3") ? "the negative iteration -3" : "\"" + text + "\", not an iteration number";
                assertTrue(printed.startsWith("pretrain-gpt failed: rank 0 failed: the marker " + marker + " holds "
                        + holds), printed);
            }
        } finally {
            Files.writeString(marker, kept);
        }
    }

    private static String messages(Throwable e) {
        StringBuilder b = new StringBuilder();
        for (Throwable t = e; t != null; t = t.getCause()) {
            b.append(t.getMessage()).append(" / ");
        }
        return b.toString();
    }
}
