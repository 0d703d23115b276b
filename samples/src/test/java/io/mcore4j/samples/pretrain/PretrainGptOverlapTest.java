package io.mcore4j.samples.pretrain;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.hf.HfCheckpoint;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code --overlap-param-gather} changes when the distributed optimizer's parameter all-gathers are
 * written, not what they write: under DP2, DP2 x TP2, DP2 x PP2 and DP2 x PP2 with two virtual stages
 * per rank, a run with it gives exactly the training losses, the validation losses (an evaluation
 * pass after steps 3 and 6) and the final weights (the {@code --save-hf} export after the loop, every
 * rank's pieces) of the same run without it. A checkpoint is saved mid-run too.
 */
class PretrainGptOverlapTest {
    @TempDir
    Path dir;

    private record Run(List<Double> losses, List<String> validation, Path weights) {}

    private Run train(int nproc, List<String> layout, boolean overlap) throws Exception {
        String name = String.join("", layout).replace("-", "") + nproc + (overlap ? "overlap" : "plain");
        Path weights = dir.resolve("hf-" + name);
        List<String> flags = new ArrayList<>(List.of("--nproc", String.valueOf(nproc), "--num-layers", "4",
                "--hidden-size", "32", "--num-attention-heads", "4", "--seq-length", "16", "--micro-batch-size", "2",
                "--global-batch-size", "8", "--lr", "1e-2", "--min-lr", "1e-3", "--lr-warmup-iters", "1",
                "--train-iters", "6", "--mock-data", "--vocab-size", "250", "--make-vocab-size-divisible-by", "64",
                "--log-interval", "1", "--seed", "11", "--clip-grad", "1.0", "--eval-interval", "3", "--eval-iters", "1",
                "--use-distributed-optimizer", "--overlap-grad-reduce", "--ddp-bucket-size", "2000",
                "--save", dir.resolve("ckpt-" + name).toString(), "--save-interval", "4",
                "--save-hf", weights.toString(), "--save-hf-dtype", "f32",
                "--metrics-dir", dir.resolve("metrics-" + name).toString()));
        flags.addAll(layout);
        if (overlap) {
            flags.add("--overlap-param-gather");
        }
        ByteArrayOutputStream text = new ByteArrayOutputStream();
        List<Double> losses = PretrainGpt.run(PretrainArgs.parse(flags.toArray(String[]::new)),
                new PrintStream(text, true, StandardCharsets.UTF_8));
        List<String> validation = Arrays.stream(text.toString(StandardCharsets.UTF_8).split("\n"))
                .filter(l -> l.contains("validation at iteration")).map(String::strip).toList();
        return new Run(losses, validation, weights);
    }

    private void assertSameTraining(int nproc, List<String> layout) throws Exception {
        Run plain = train(nproc, layout, false);
        Run overlapped = train(nproc, layout, true);
        String what = "DP2 " + layout;
        assertEquals(6, plain.losses().size(), what);
        assertEquals(plain.losses(), overlapped.losses(), what + ": training losses");
        assertEquals(2, plain.validation().size(), what + ": " + plain.validation());
        assertEquals(plain.validation(), overlapped.validation(), what + ": validation losses");
        try (HfCheckpoint a = HfCheckpoint.open(plain.weights()); HfCheckpoint b = HfCheckpoint.open(overlapped.weights())) {
            assertEquals(a.tensorNames(), b.tensorNames(), what);
            assertFalse(a.tensorNames().isEmpty(), what);
            for (String name : a.tensorNames()) {
                assertArrayEquals(a.readTensor(name), b.readTensor(name), what + ": final " + name);
            }
        }
    }

    @Test
    void dataParallelAloneAndWithTensorParallelism() throws Exception {
        assertSameTraining(2, List.of());
        assertSameTraining(4, List.of("--tensor-model-parallel-size", "2"));
    }

    @Test
    void withPipelineParallelismAndVirtualStages() throws Exception {
        assertSameTraining(4, List.of("--pipeline-model-parallel-size", "2"));
        assertSameTraining(4, List.of("--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage", "1"));
    }

    @Test
    void theFlagIsMegatronsAndNeedsWhatMegatronAsserts() {
        String noDistributed = assertThrows(IllegalArgumentException.class,
                () -> PretrainArgs.parse("--mock-data", "--overlap-param-gather", "--overlap-grad-reduce").setup()).getMessage();
        assertEquals("--overlap-param-gather needs --use-distributed-optimizer (not given): only the distributed optimizer"
                + " all-gathers the updated parameters, as Megatron asserts", noDistributed);
        String noGradOverlap = assertThrows(IllegalArgumentException.class,
                () -> PretrainArgs.parse("--mock-data", "--overlap-param-gather", "--use-distributed-optimizer").setup())
                .getMessage();
        assertTrue(noGradOverlap.startsWith("--overlap-param-gather needs --overlap-grad-reduce (not given)"), noGradOverlap);
        assertTrue(PretrainArgs.parse("--mock-data", "--overlap-param-gather", "--use-distributed-optimizer",
                "--overlap-grad-reduce").setup().optimizer().overlapParamGather());
    }
}
