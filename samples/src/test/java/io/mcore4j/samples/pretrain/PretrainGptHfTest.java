package io.mcore4j.samples.pretrain;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.hf.HfCheckpoint;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.List;

import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * {@code pretrain-gpt --load-hf DIR --save-hf OUT}: the tiny LLaMA, Qwen3 and Gemma 3 fixtures of hf-bridge (bf16) are
 * imported at TP2 x PP2, trained two iterations with a zero learning rate and exported as bf16:
 * every tensor comes back bitwise (bf16 -> float32 -> bf16 is exact), so the import happened before
 * the optimizer took its copies and the export wrote every rank's pieces.
 */
class PretrainGptHfTest {
    @TempDir
    Path tmp;

    @ParameterizedTest
    @ValueSource(strings = {"llama", "qwen3", "gemma3"})
    void loadHfTrainSaveHfRoundTrips(String fixture) throws Exception {
        Path source = Path.of("..", "hf-bridge", "src", "test", "resources", "hf", fixture);
        Path out = tmp.resolve("out");
        ByteArrayOutputStream text = new ByteArrayOutputStream();
        List<Double> losses = PretrainGpt.run(PretrainArgs.parse("--nproc", "4", "--tensor-model-parallel-size", "2",
                "--pipeline-model-parallel-size", "2", "--load-hf", source.toString(), "--save-hf", out.toString(),
                "--mock-data", "--seq-length", "16", "--micro-batch-size", "2", "--global-batch-size", "4",
                "--train-iters", "2", "--lr", "0", "--min-lr", "0", "--lr-warmup-iters", "0", "--log-interval", "1",
                "--make-vocab-size-divisible-by", "8", "--metrics-dir", tmp.resolve("metrics").toString()),
                new PrintStream(text, true, StandardCharsets.UTF_8));
        assertEquals(2, losses.size());
        String log = text.toString(StandardCharsets.UTF_8);
        assertTrue(log.contains("imported") && log.contains("exported"), log);
        try (HfCheckpoint a = HfCheckpoint.open(source); HfCheckpoint b = HfCheckpoint.open(out)) {
            assertEquals(a.tensorNames(), b.tensorNames());
            for (String name : a.tensorNames()) {
                assertArrayEquals(a.readTensor(name), b.readTensor(name), name);
            }
        }
    }
}
