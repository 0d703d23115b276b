package io.mcore4j.samples.pretrain;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.optimizer.OptimizerConfig;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * pretrain-gpt's {@code --optimizer-cpu-offload} ({@code --cpu-optimizer}) and
 * {@code --optimizer-offload-fraction}: Megatron's names and default, the combinations Megatron
 * refuses exit with 2 and one line, and a run with offload has the losses of the run without it.
 */
class PretrainGptOffloadTest {
    @TempDir
    Path dir;

    private List<String> flags(String... more) {
        List<String> f = new ArrayList<>(List.of("--nproc", "2", "--num-layers", "2", "--hidden-size", "32",
                "--num-attention-heads", "4", "--seq-length", "16", "--micro-batch-size", "2", "--global-batch-size", "4",
                "--lr", "1e-3", "--min-lr", "1e-4", "--train-iters", "4", "--mock-data", "--vocab-size", "250",
                "--make-vocab-size-divisible-by", "64", "--log-interval", "2", "--seed", "5", "--ddp-bucket-size", "3000",
                "--use-distributed-optimizer", "--metrics-dir", dir.resolve("metrics-" + System.nanoTime()).toString()));
        f.addAll(List.of(more));
        return f;
    }

    @Test
    void theFlagsReachTheOptimizerConfigWithMegatronsDefault() {
        OptimizerConfig off = PretrainArgs.parse(flags().toArray(String[]::new)).setup().optimizer();
        assertFalse(off.optimizerCpuOffload());
        assertEquals(1.0, off.optimizerOffloadFraction());
        OptimizerConfig on = PretrainArgs.parse(flags("--optimizer-cpu-offload").toArray(String[]::new)).setup().optimizer();
        assertTrue(on.optimizerCpuOffload());
        assertEquals(1.0, on.optimizerOffloadFraction());
        OptimizerConfig alias = PretrainArgs.parse(flags("--cpu-optimizer", "--optimizer-offload-fraction", "0.25")
                .toArray(String[]::new)).setup().optimizer();
        assertTrue(alias.optimizerCpuOffload());
        assertEquals(0.25, alias.optimizerOffloadFraction());
    }

    @Test
    void badValuesAndCombinationsMegatronRefusesExitWithTwoAndOneLine() {
        String[][] cases = {
            {"--optimizer-cpu-offload", "--optimizer-offload-fraction", "0"},
            {"--optimizer-cpu-offload", "--optimizer-offload-fraction", "1.5"},
            {"--optimizer-offload-fraction", "-1"},
            {"--optimizer-cpu-offload", "--optimizer-offload-fraction", "half"},
            {"--optimizer-cpu-offload", "--optimizer", "sgd"},
            {"--cpu-optimizer", "--optimizer", "sgd"},
        };
        String[] lines = {
            "pretrain-gpt: --optimizer-offload-fraction 0.0 must be in (0, 1]",
            "pretrain-gpt: --optimizer-offload-fraction 1.5 must be in (0, 1]",
            "pretrain-gpt: --optimizer-offload-fraction -1.0 must be in (0, 1]",
            "'half' is not a double",
            "pretrain-gpt: --optimizer-cpu-offload needs --optimizer adam (got sgd): Megatron requires"
                    + " --use-precision-aware-optimizer with it, which supports only adam",
            "pretrain-gpt: --optimizer-cpu-offload needs --optimizer adam (got sgd)",
        };
        for (int i = 0; i < cases.length; i++) {
            assertRefused(flags(cases[i]), lines[i]);
        }
        List<String> plain = flags("--optimizer-cpu-offload");
        plain.remove("--use-distributed-optimizer");
        assertRefused(plain, "pretrain-gpt: --optimizer-cpu-offload needs --use-distributed-optimizer: Megatron"
                + " requires --use-precision-aware-optimizer with it, which supports only the distributed optimizer");
    }

    private static void assertRefused(List<String> argv, String line) {
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        int code = PretrainGpt.execute("pretrain-gpt", argv.toArray(String[]::new),
                new PrintStream(new ByteArrayOutputStream(), true, StandardCharsets.UTF_8),
                new PrintStream(err, true, StandardCharsets.UTF_8), (a, o) -> { throw new AssertionError("ran"); });
        String text = err.toString(StandardCharsets.UTF_8);
        assertEquals(2, code, argv + ": " + text);
        assertTrue(text.lines().findFirst().orElse("").contains(line), argv + " -> " + text);
        assertTrue(!text.contains("\tat "), "no stack trace: " + text);
    }

    /** DP2 with the distributed optimizer, bf16: on the CPU the offloaded step is the same arithmetic. */
    @Test
    void aRunWithOffloadHasTheLossesOfTheRunWithout() throws Exception {
        PrintStream quiet = new PrintStream(new ByteArrayOutputStream(), true, StandardCharsets.UTF_8);
        List<Double> onDevice = PretrainGpt.run(PretrainArgs.parse(flags("--bf16").toArray(String[]::new)), quiet);
        List<Double> offloaded = PretrainGpt.run(PretrainArgs.parse(flags("--bf16", "--optimizer-cpu-offload",
                "--optimizer-offload-fraction", "0.5").toArray(String[]::new)), quiet);
        assertEquals(4, onDevice.size());
        assertEquals(onDevice, offloaded);
    }
}
