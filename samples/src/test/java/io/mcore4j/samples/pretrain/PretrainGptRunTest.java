package io.mcore4j.samples.pretrain;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import io.mcore4j.data.indexed.DType;
import io.mcore4j.data.indexed.IndexedDatasetWriter;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The run-level behaviour of pretrain-gpt's loop: fused attention equals the composed one, a resumed
 * run keeps its learning-rate schedule unless told otherwise, a save directory is never shared by
 * two runs, and bad flags exit with 2 and one line naming them.
 */
class PretrainGptRunTest {
    @TempDir
    Path dir;

    private List<String> flags(int iterations, String... more) {
        List<String> f = new ArrayList<>(List.of("--nproc", "2", "--tensor-model-parallel-size", "2", "--num-layers", "2",
                "--hidden-size", "32", "--num-attention-heads", "4", "--num-query-groups", "2", "--seq-length", "16",
                "--position-embedding-type", "rope", "--micro-batch-size", "2", "--global-batch-size", "4", "--lr", "1e-3",
                "--min-lr", "1e-4", "--train-iters", String.valueOf(iterations), "--mock-data", "--vocab-size", "250",
                "--make-vocab-size-divisible-by", "64", "--log-interval", "2", "--seed", "5",
                "--metrics-dir", dir.resolve("metrics-" + System.nanoTime()).toString()));
        f.addAll(List.of(more));
        return f;
    }

    private static List<Double> train(List<String> flags) throws Exception {
        PrintStream quiet = new PrintStream(new ByteArrayOutputStream(), true, StandardCharsets.UTF_8);
        return PretrainGpt.run(PretrainArgs.parse(flags.toArray(String[]::new)), quiet);
    }

    @Test
    void moeAuxiliaryLossesAreLoggedPerIntervalAndPerLayer() throws Exception {
        Path metrics = dir.resolve("moe-metrics");
        List<String> f = flags(4, "--num-experts", "4", "--moe-router-topk", "2", "--moe-aux-loss-coeff", "0.01",
                "--moe-per-layer-logging");
        f.set(f.indexOf("--metrics-dir") + 1, metrics.toString());
        ByteArrayOutputStream console = new ByteArrayOutputStream();
        PretrainGpt.run(PretrainArgs.parse(f.toArray(String[]::new)), new PrintStream(console, true, StandardCharsets.UTF_8));
        String text = console.toString(StandardCharsets.UTF_8);
        // loss / coeff of a balanced router is about 1 (E experts, top-k: E * sum_e f_e P_e with f_e = P_e = 1/E)
        assertLoggedPerWindow(text, "load_balancing_loss", 0.9, 2.0);
        String records = java.nio.file.Files.readString(metrics.resolve("metrics.jsonl"));
        // the metrics file writes Megatron's names: moe/<name>_layer_<i>
        assertTrue(records.contains("\"load_balancing_loss\"") && records.contains("\"moe/load_balancing_loss_layer_0\"")
                && records.contains("\"moe/load_balancing_loss_layer_1\""), records);
    }

    /**
     * Multi-token prediction at TP2: each depth's loss is logged per window as Megatron names it ({@code mtp_1 loss},
     * about ln V at the start), the logged lm loss stays the main model's (with {@code --mtp-loss-scaling-factor 0}
     * the run gives the losses of a run without the depths, step for step), a positive factor changes the training,
     * and the layouts it does not run on are refused by name.
     */
    @Test
    void multiTokenPredictionIsLoggedAndOnlyItsFactorTrainsIt() throws Exception {
        Path metrics = dir.resolve("mtp-metrics");
        List<String> f = flags(4, "--mtp-num-layers", "1", "--mtp-loss-scaling-factor", "0");
        f.set(f.indexOf("--metrics-dir") + 1, metrics.toString());
        ByteArrayOutputStream console = new ByteArrayOutputStream();
        List<Double> zero = PretrainGpt.run(PretrainArgs.parse(f.toArray(String[]::new)),
                new PrintStream(console, true, StandardCharsets.UTF_8));
        String text = console.toString(StandardCharsets.UTF_8);
        assertLoggedPerWindow(text, "mtp_1 loss", 4, 7); // about ln 256 = 5.5
        assertTrue(java.nio.file.Files.readString(metrics.resolve("metrics.jsonl")).contains("\"mtp_1 loss\""));
        List<Double> without = train(flags(4));
        PretrainRuns.assertSameLosses(without, zero, "--mtp-loss-scaling-factor 0");
        List<Double> weighted = train(flags(4, "--mtp-num-layers", "1"));
        assertTrue(Math.abs(weighted.get(1) - without.get(1)) > 1e-6, weighted + " vs " + without);
        assertTrue(PretrainRuns.refusal(flags(1, "--mtp-num-layers", "1", "--pipeline-model-parallel-size", "2",
                "--tensor-model-parallel-size", "1")).contains("--mtp-num-layers 1 runs on one pipeline stage"));
        assertTrue(PretrainRuns.refusal(flags(1, "--mtp-num-layers", "0")).contains("--mtp-num-layers 0 must be at least"
                + " 1"));
    }

    /**
     * The DeepSeek-V3 pattern (multi-latent attention, a dense first layer, grouped sigmoid routing over fine-grained
     * experts with a shared expert, multi-token prediction) trains in bfloat16 as in float32: every tensor the
     * pattern creates of its input's dtype is one libtorch can make in bfloat16 (DJL's own zeros abort the JVM there).
     */
    @Test
    void theDeepSeekV3PatternTrainsInBfloat16AsInFloat32() throws Exception {
        List<String> pattern = List.of("--tensor-model-parallel-size", "1", "--expert-model-parallel-size", "2",
                "--normalization", "RMSNorm", "--swiglu", "--disable-bias-linear", "--multi-latent-attention",
                "--q-lora-rank", "24", "--kv-lora-rank", "16", "--qk-head-dim", "8", "--qk-pos-emb-head-dim", "4",
                "--v-head-dim", "8", "--num-experts", "16", "--moe-router-topk", "4", "--moe-ffn-hidden-size", "16",
                "--moe-shared-expert-intermediate-size", "16", "--moe-layer-freq", "([0]*1+[1]*1)",
                "--moe-router-score-function", "sigmoid", "--moe-router-enable-expert-bias", "--moe-router-num-groups", "4",
                "--moe-router-group-topk", "2", "--moe-router-topk-scaling-factor", "2.5", "--moe-router-load-balancing-type",
                "seq_aux_loss", "--moe-aux-loss-coeff", "1e-4", "--moe-token-dispatcher-type", "alltoall",
                "--moe-grouped-gemm", "--moe-permute-fusion", "--mtp-num-layers", "1");
        List<String> f32 = flags(2, pattern.toArray(String[]::new));
        List<String> bf16 = new ArrayList<>(f32);
        bf16.add("--bf16");
        List<Double> want = train(f32);
        List<Double> got = train(bf16);
        for (int i = 0; i < want.size(); i++) {
            assertEquals(want.get(i), got.get(i), 2e-2 * want.get(i), "iteration " + (i + 1) + " in bfloat16");
        }
    }

    /** Asserts one value of {@code name} in each of a 4-iteration run's two logged windows, each within (low, high). */
    private static void assertLoggedPerWindow(String text, String name, double low, double high) {
        java.util.regex.Matcher m = java.util.regex.Pattern.compile("\\| " + name + " ([0-9.E+-]+)").matcher(text);
        int lines = 0;
        while (m.find()) {
            double value = Double.parseDouble(m.group(1));
            assertTrue(value > low && value < high, name + " " + value + " in\n" + text);
            lines++;
        }
        assertEquals(2, lines, "one value per logged window (iterations 2 and 4):\n" + text);
    }

    @Test
    void fusedAttentionGivesTheComposedAttentionsLosses() throws Exception {
        List<Double> composed = train(flags(6, "--attention-backend", "unfused"));
        List<Double> fused = train(flags(6, "--attention-backend", "flash"));
        List<Double> auto = train(flags(6));
        assertEquals(6, composed.size());
        for (int i = 0; i < composed.size(); i++) {
            double rel = Math.abs(fused.get(i) - composed.get(i)) / composed.get(i);
            assertTrue(rel <= 1e-5, "iteration " + (i + 1) + ": fused " + fused.get(i) + " vs composed " + composed.get(i));
            assertEquals(fused.get(i), auto.get(i), 0.0, "auto picks the fused attention without attention dropout");
        }
    }

    @Test
    void aResumedRunKeepsItsScheduleUnlessTold() throws Exception {
        Path save = dir.resolve("ckpt");
        train(flags(4, "--save", save.toString()));
        // --train-iters 8 without --lr-decay-iters would stretch the cosine decay from 4 to 8 iterations
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> train(flags(8, "--load", save.toString())));
        assertTrue(rootMessage(e).contains("lr_decay_steps (--lr-decay-iters (default --train-iters)) is 8 but the"
                + " checkpoint's is 4"), rootMessage(e));
        List<Double> kept = train(flags(8, "--load", save.toString(), "--use-checkpoint-opt_param-scheduler"));
        List<Double> explicit = train(flags(8, "--load", save.toString(), "--lr-decay-iters", "4"));
        assertEquals(explicit, kept, "the checkpoint's schedule is the one with --lr-decay-iters 4");
        List<Double> overridden = train(flags(8, "--load", save.toString(), "--override-opt-param-scheduler"));
        assertEquals(4, overridden.size());
        assertTrue(!overridden.equals(kept), "the overriding schedule decays over 8 iterations: other losses");
    }

    @Test
    void aSaveDirectoryIsNeverSharedByTwoRuns() throws Exception {
        Path save = dir.resolve("shared");
        train(flags(2, "--save", save.toString()));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> train(flags(2, "--save", save.toString())));
        assertTrue(rootMessage(e).contains("--save " + save + " already holds checkpoints (latest iteration 2) of another run;"
                + " pass --load " + save), rootMessage(e));
        // the Megatron idiom --load X --save X resumes, and a finished run does nothing more
        assertEquals(2, train(flags(4, "--load", save.toString(), "--save", save.toString(), "--lr-decay-iters", "2")).size());
        assertEquals(0, train(flags(4, "--load", save.toString(), "--save", save.toString(), "--lr-decay-iters", "2")).size());
        // a --load directory without a checkpoint starts from scratch, unless --exit-on-missing-checkpoint
        Path empty = dir.resolve("empty");
        assertEquals(2, train(flags(2, "--load", empty.toString(), "--save", empty.toString())).size());
        Path none = dir.resolve("none");
        assertThrows(IllegalArgumentException.class, () -> train(flags(2, "--load", none.toString(), "--exit-on-missing-checkpoint")));
    }

    @Test
    void aMetricsFileHoldsOneRun() throws Exception {
        Path metrics = dir.resolve("one-run");
        Path save = dir.resolve("one-run-ckpt");
        List<String> first = flags(4, "--save", save.toString());
        first.addAll(List.of("--metrics-dir", metrics.toString()));
        train(first);
        String firstRun = Files.readString(metrics.resolve("metrics.jsonl"));
        assertEquals(2, firstRun.lines().filter(l -> l.contains("\"lm loss\"")).count(), firstRun);
        List<String> fresh = flags(4);
        fresh.addAll(List.of("--metrics-dir", metrics.toString()));
        train(fresh);
        assertEquals(firstRun, Files.readString(metrics.resolve("metrics.jsonl.1")), "the first run's records, moved aside");
        assertEquals(2, Files.readString(metrics.resolve("metrics.jsonl")).lines().filter(l -> l.contains("\"lm loss\"")).count());
        List<String> resumed = flags(6, "--load", save.toString(), "--lr-decay-iters", "4");
        resumed.addAll(List.of("--metrics-dir", dir.resolve("one-run-ckpt").toString()));
        train(resumed);
        List<String> lines = Files.readAllLines(save.resolve("metrics.jsonl"));
        assertEquals(1, lines.stream().filter(l -> l.contains("\"lm loss\"")).count(), "resumed at 4: only iteration 6 logged");
    }

    /** --bf16 end to end at TP2 through the training loop: the fp32 run's losses within 2%, loss scale 1. */
    @Test
    void bf16TracksFp32() throws Exception {
        List<Double> fp32 = train(flags(6));
        List<Double> bf16 = train(flags(6, "--bf16"));
        assertEquals(fp32.size(), bf16.size());
        for (int i = 0; i < fp32.size(); i++) {
            double rel = Math.abs(bf16.get(i) - fp32.get(i)) / fp32.get(i);
            assertTrue(rel <= 0.02, "iteration " + (i + 1) + ": bf16 " + bf16.get(i) + " vs fp32 " + fp32.get(i));
        }
    }

    @Test
    void badFlagsExitWithTwoAndOneLineNamingThem() {
        String[][] cases = {
            {"--tensor-model-parallel-size", "0"}, {"--nproc", "0"}, {"--num-attention-heads", "0"},
            {"--ffn-hidden-size", "-8"}, {"--eval-interval", "5", "--eval-iters", "0"},
            {"--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage", "3"},
            {"--seq-length", "200000", "--attention-backend", "unfused", "--max-position-embeddings", "200000"},
            {"--global-batch-size", "1000000000"}, {"--split", "100,0,0", "--eval-interval", "5"},
            {"--lr-decay-style", "square"}, {"--micro-batch-size", "abc"}, {"--frobnicate"}, {"--fp16", "--bf16"},
            {"--cp-comm-type", "a2a+p2p"}, {"--cp-comm-type", "p2p2"},
        };
        String[] names = {"--tensor-model-parallel-size 0", "--nproc 0", "--num-attention-heads 0", "--ffn-hidden-size -8",
            "--eval-iters 0", "--num-layers-per-virtual-pipeline-stage 3", "--seq-length 200000", "--global-batch-size 1000000000",
            "--split 100,0,0", "--lr-decay-style", "--micro-batch-size", "--frobnicate", "--fp16 and --bf16",
            "--cp-comm-type a2a+p2p needs two --hierarchical-context-parallel-sizes",
            "--cp-comm-type': expected one of [p2p, allgather, all_gather, a2a, a2a_p2p, a2a+p2p] (case-sensitive) but was 'p2p2'"};
        for (int i = 0; i < cases.length; i++) {
            List<String> argv = new ArrayList<>(List.of("--mock-data"));
            argv.addAll(List.of(cases[i]));
            ByteArrayOutputStream err = new ByteArrayOutputStream();
            int code = PretrainGpt.execute("pretrain-gpt", argv.toArray(String[]::new),
                    new PrintStream(new ByteArrayOutputStream(), true, StandardCharsets.UTF_8),
                    new PrintStream(err, true, StandardCharsets.UTF_8), (a, o) -> { throw new AssertionError("ran"); });
            String text = err.toString(StandardCharsets.UTF_8);
            assertEquals(2, code, String.join(" ", cases[i]) + ": " + text);
            String first = text.lines().findFirst().orElse("");
            assertTrue(first.startsWith("pretrain-gpt: ") && first.contains(names[i]), String.join(" ", cases[i]) + " -> " + text);
            assertTrue(!text.contains("\tat "), "no stack trace: " + text);
        }
    }

    @Test
    void tokenIdsOutsideTheVocabularyStopTheRunAtTp2() throws Exception {
        Path prefix = dir.resolve("corpus");
        try (IndexedDatasetWriter w = IndexedDatasetWriter.create(prefix, DType.UINT16)) {
            for (int d = 0; d < 8; d++) {
                int[] tokens = new int[64];
                for (int i = 0; i < tokens.length; i++) {
                    tokens[i] = (d * 13 + i) % 200;
                }
                tokens[7] = d == 3 ? 300 : tokens[7];
                w.addDocument(tokens);
            }
            w.finish();
        }
        List<String> argv = flags(2);
        argv.remove("--mock-data");
        argv.addAll(List.of("--data-path", prefix.toString(), "--split", "100,0,0"));
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        int code = PretrainGpt.execute("pretrain-gpt", argv.toArray(String[]::new),
                new PrintStream(new ByteArrayOutputStream(), true, StandardCharsets.UTF_8),
                new PrintStream(err, true, StandardCharsets.UTF_8), PretrainGpt::run);
        String text = err.toString(StandardCharsets.UTF_8);
        assertEquals(2, code, text);
        assertTrue(text.contains("token id 300 at position 7 of document 3"), text);
    }

    @Test
    void aFailedRunIsOneLineWithItsCausesAndExitsWithOne() {
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        int code = PretrainGpt.execute("pretrain-gpt", new String[] {"--mock-data"},
                new PrintStream(new ByteArrayOutputStream(), true, StandardCharsets.UTF_8),
                new PrintStream(err, true, StandardCharsets.UTF_8), (a, o) -> {
                    throw new IllegalStateException("rank 1 failed", new IOException("No space left on device"));
                });
        String text = err.toString(StandardCharsets.UTF_8);
        assertEquals(1, code, text);
        assertEquals(List.of("pretrain-gpt failed: rank 1 failed: IOException: No space left on device"),
                text.lines().toList());
    }

    /** The run says how many threads each CPU operation gets, and --cpu-threads sets libtorch's count. */
    @Test
    void theRunSaysItsCpuThreadsAndTheFlagSetsThem() throws Exception {
        int before = io.mcore4j.core.CpuThreads.current();
        try {
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            PretrainGpt.run(PretrainArgs.parse(flags(1, "--cpu-threads", "2").toArray(String[]::new)),
                    new PrintStream(out, true, StandardCharsets.UTF_8));
            String text = out.toString(StandardCharsets.UTF_8);
            assertTrue(text.lines().anyMatch(l -> l.equals("CPU: 2 intra-op threads per operation (--cpu-threads;"
                    + " --cpu-threads sets it)")), text);
            assertEquals(2, io.mcore4j.core.CpuThreads.current());
            out.reset();
            PretrainGpt.run(PretrainArgs.parse(flags(1).toArray(String[]::new)), new PrintStream(out, true, StandardCharsets.UTF_8));
            // surefire runs the tests with -Dai.djl.pytorch.num_threads=1, which a run without the flag keeps
            assertTrue(out.toString(StandardCharsets.UTF_8).contains("CPU: 1 intra-op thread per operation"
                    + " (-Dai.djl.pytorch.num_threads; --cpu-threads sets it)"), out.toString(StandardCharsets.UTF_8));
            assertEquals(1, io.mcore4j.core.CpuThreads.current());
        } finally {
            new io.mcore4j.core.CpuThreads(before, "test").apply();
        }
    }

    @Test
    void helpListsTheFlagsAndExitsWithZero() {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        int code = PretrainGpt.execute("pretrain-gpt", new String[] {"--help"},
                new PrintStream(out, true, StandardCharsets.UTF_8), System.err, (a, o) -> { throw new AssertionError("ran"); });
        String text = out.toString(StandardCharsets.UTF_8);
        assertEquals(0, code);
        assertTrue(text.startsWith("Usage: pretrain-gpt"), text);
        for (String flag : List.of("--tensor-model-parallel-size", "--attention-backend", "--override-opt-param-scheduler",
                "--vocab-size", "--eval-iters", "--weight-decay", "--peak-tflops", "--num-experts")) {
            assertTrue(text.contains(flag), flag + " missing from --help");
        }
    }

    private static String rootMessage(Throwable e) {
        Throwable t = e;
        while (t.getCause() != null) {
            t = t.getCause();
        }
        return t.getMessage();
    }
}
