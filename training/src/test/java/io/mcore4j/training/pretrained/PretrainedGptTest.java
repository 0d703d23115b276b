package io.mcore4j.training.pretrained;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.types.DataType;
import com.google.gson.Gson;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import io.mcore4j.hf.HfDtype;
import io.mcore4j.models.transformer.LoraConfig;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.inprocess.InJvmWorld;
import io.mcore4j.tensorparallel.LoraLinear;

import java.io.IOException;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.function.Function;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@link PretrainedGpt} on hf-bridge's tiny transformers fixtures, against numbers computed without it:
 * transformers' logits of the fixture prompt (pipeline stages, experts, a batch of two); the first
 * fine-tuning loss against the cross-entropy of the model's own logits; a LoRA fine-tuned model saved at
 * TP2 and read back at TP1 from its checkpoint and from its merged Hugging Face export; and the inputs
 * it refuses, each naming the value.
 */
class PretrainedGptTest {
    private static final Path FIXTURES = Path.of("..", "hf-bridge", "src", "test", "resources", "hf");
    private static final PrintStream QUIET = new PrintStream(OutputStream.nullOutputStream());

    @TempDir
    Path dir;

    private static JsonObject reference(String name) throws IOException {
        return JsonParser.parseString(Files.readString(FIXTURES.resolve(name).resolve("logits.json"), StandardCharsets.UTF_8))
                .getAsJsonObject();
    }

    private static int[] prompt(String name) throws IOException {
        return new Gson().fromJson(reference(name).get("input_ids"), int[].class);
    }

    /** Runs {@code task} on every rank of a world with {@code dims}, loading {@code load}; returns rank 0's result. */
    private static <T> T onEveryRank(ParallelDims dims, Loader load, Function<PretrainedGpt, T> task) {
        return InJvmWorld.run(dims.worldSize(), rank -> {
            try (PretrainedGpt model = load.load(rank.groups(dims), rank)) {
                return task.apply(model);
            }
        }).get(0);
    }

    @FunctionalInterface
    private interface Loader {
        PretrainedGpt load(io.mcore4j.parallel.ProcessGroups groups, InJvmWorld.Rank rank);
    }

    private static Loader huggingFace(Path dir, LoadOptions options) {
        return (groups, rank) -> PretrainedGpt.fromHuggingFace(dir, groups, rank.manager(), options);
    }

    private static double largestDifference(float[][] actual, float[][] expected) {
        double worst = 0;
        for (int s = 0; s < expected.length; s++) {
            assertEquals(expected[s].length, actual[s].length, "vocabulary columns");
            for (int v = 0; v < expected[s].length; v++) {
                worst = Math.max(worst, Math.abs(actual[s][v] - expected[s][v]));
            }
        }
        return worst;
    }

    /**
     * Qwen2 (tied embedding, split over two stages) at PP2, LLaMA at TP2 x PP2 and Mixtral's experts at
     * EP2: row 0 is transformers', row 1 is row 1 alone.
     */
    @Test
    void logitsThroughThePipelineAreTransformers() throws IOException {
        for (String name : List.of("qwen2", "llama", "mixtral")) {
            ParallelDims dims = switch (name) {
                case "qwen2" -> ParallelDims.of(2, 1, 2);
                case "llama" -> ParallelDims.of(4, 2, 2);
                default -> ParallelDims.builder(2).expertParallel(2).build();
            };
            int[] first = prompt(name);
            int[] second = first.clone();
            for (int i = 0; i < second.length; i++) {
                second[i] = (first[first.length - 1 - i] + 7) % 100;
            }
            float[][][] both = onEveryRank(dims, huggingFace(FIXTURES.resolve(name), LoadOptions.DEFAULTS),
                    m -> m.logits(new int[][] {first, second}));
            float[][][] alone = onEveryRank(ParallelDims.of(1, 1, 1), huggingFace(FIXTURES.resolve(name), LoadOptions.DEFAULTS),
                    m -> m.logits(new int[][] {second}));
            float[][] expected = new Gson().fromJson(reference(name).get("logits"), float[][].class);
            double error = largestDifference(both[0], expected);
            double batch = largestDifference(both[1], alone[0]);
            System.out.printf("%s at %s: logits within %.3g of transformers'; the batch's second row within %.3g of it alone%n",
                    name, dims, error, batch);
            assertTrue(error <= 1e-5, name + ": " + error);
            assertTrue(batch <= 1e-5, name + ": " + batch);
        }
    }

    /** The step's first loss is the mean cross-entropy of the labels under the logits the model gave for the inputs. */
    @Test
    void theFirstLossIsTheCrossEntropyOfTheModelsLogits() {
        int[][] samples = new int[4][13];
        for (int i = 0; i < samples.length; i++) {
            for (int j = 0; j < samples[i].length; j++) {
                samples[i][j] = (11 * i + 3 * j + 1) % 100;
            }
        }
        int[][] inputs = new int[4][];
        for (int i = 0; i < 4; i++) {
            inputs[i] = java.util.Arrays.copyOf(samples[i], 12);
        }
        FineTuning tuning = FineTuning.builder().iterations(2).lr(1e-3).microBatchSize(2).globalBatchSize(4).log(QUIET).build();
        double[] result = onEveryRank(ParallelDims.of(2, 2, 1), huggingFace(FIXTURES.resolve("llama"), LoadOptions.DEFAULTS), m -> {
            float[][][] logits = m.logits(inputs);
            double sum = 0;
            for (int i = 0; i < 4; i++) {
                for (int s = 0; s < 12; s++) {
                    double max = Double.NEGATIVE_INFINITY;
                    for (float v : logits[i][s]) {
                        max = Math.max(max, v);
                    }
                    double z = 0;
                    for (float v : logits[i][s]) {
                        z += Math.exp(v - max);
                    }
                    sum += max + Math.log(z) - logits[i][s][samples[i][s + 1]];
                }
            }
            return new double[] {sum / 48, m.fineTune(samples, tuning).get(0)};
        });
        System.out.printf("first loss %.7f, cross-entropy of the logits %.7f%n", result[1], result[0]);
        assertEquals(result[0], result[1], 1e-5 * result[0]);
    }

    /**
     * LoRA at TP2: the adapters train (the logits move), the base weights do not leave the checkpoint's
     * shape; saved, the checkpoint read at TP1 with the same adapters, and the Hugging Face export (merged)
     * read at TP1 without any, give the fine-tuned logits.
     */
    @Test
    void aLoraFineTunedModelSavedAtTp2ReadsBackAtTp1() throws IOException {
        Path checkpoint = dir.resolve("checkpoint");
        Path exported = dir.resolve("exported");
        LoadOptions lora = LoadOptions.DEFAULTS.withLora(new LoraConfig(4, 8, 0, LoraConfig.ALL_LINEARS));
        int[][] prompt = {prompt("llama")};
        int[][] samples = new int[4][9];
        for (int i = 0; i < samples.length; i++) {
            for (int j = 0; j < samples[i].length; j++) {
                samples[i][j] = (7 * i + 2 * j) % 100;
            }
        }
        FineTuning tuning = FineTuning.builder().iterations(3).lr(5e-2).microBatchSize(1).globalBatchSize(2).log(QUIET).build();
        float[][][][] beforeAfter = onEveryRank(ParallelDims.of(2, 2, 1), huggingFace(FIXTURES.resolve("llama"), lora), m -> {
            float[][][] before = m.logits(prompt);
            m.fineTune(samples, tuning);
            for (var chunk : m.chunks()) {
                chunk.namedParameters("").forEach((key, p) -> assertEquals(LoraLinear.isAdapterKey(key), p.isTrainable(),
                        key + ": only the adapters train"));
            }
            float[][][] after = m.logits(prompt);
            m.saveCheckpoint(checkpoint);
            m.saveHuggingFace(exported, HfDtype.F32);
            return new float[][][][] {before, after};
        });
        double moved = largestDifference(beforeAfter[1][0], beforeAfter[0][0]);
        float[][][] fromCheckpoint = onEveryRank(ParallelDims.of(1, 1, 1),
                (groups, rank) -> PretrainedGpt.fromCheckpoint(checkpoint, null, groups, rank.manager(), lora), m -> m.logits(prompt));
        float[][][] fromExport = onEveryRank(ParallelDims.of(1, 1, 1), huggingFace(exported, LoadOptions.DEFAULTS),
                m -> m.logits(prompt));
        System.out.printf("LoRA moved the logits by %.3g; TP1 from the checkpoint within %.3g, from the export within %.3g%n",
                moved, largestDifference(fromCheckpoint[0], beforeAfter[1][0]), largestDifference(fromExport[0], beforeAfter[1][0]));
        assertTrue(moved > 1e-2, "the adapters trained: " + moved);
        assertTrue(largestDifference(fromCheckpoint[0], beforeAfter[1][0]) <= 1e-5);
        assertTrue(largestDifference(fromExport[0], beforeAfter[1][0]) <= 1e-5);
        String withoutAdapters = refused("model weights it has no place for (e.g. model.decoder.layers.", () -> onEveryRank(
                ParallelDims.of(1, 1, 1), (groups, rank) -> PretrainedGpt.fromCheckpoint(checkpoint, groups, rank.manager()),
                m -> null));
        assertTrue(withoutAdapters.contains("LoadOptions.lora"), withoutAdapters);
    }

    @Test
    void badInputsAreRefusedNamingTheValue() {
        Path llama = FIXTURES.resolve("llama");
        Path missing = dir.resolve("missing");
        refused("Hugging Face directory " + missing + " does not exist; expected a Hugging Face checkpoint directory",
                () -> onEveryRank(ParallelDims.of(1, 1, 1), huggingFace(missing, LoadOptions.DEFAULTS), m -> null));
        refused("checkpoint directory " + dir + " holds no complete checkpoint", () -> onEveryRank(ParallelDims.of(1, 1, 1),
                (groups, rank) -> PretrainedGpt.fromCheckpoint(dir, groups, rank.manager()), m -> null));
        refused("parameter dtype INT8 is not one mcore4j trains in", () -> LoadOptions.DEFAULTS.withDtype(DataType.INT8));
        refused("global batch size 3 is not a positive multiple of the micro-batch size 2",
                () -> FineTuning.builder().microBatchSize(2).globalBatchSize(3).build());
        FineTuning tuning = FineTuning.builder().iterations(1).log(QUIET).build();
        onEveryRank(ParallelDims.of(1, 1, 1), huggingFace(llama, LoadOptions.DEFAULTS), m -> {
            refused("sequence 0, position 2: token id 100 is outside the model's vocabulary [0, 100)",
                    () -> m.logits(new int[][] {{1, 2, 100}}));
            refused("sequence 1 has 2 tokens but sequence 0 has 3; expected rows of equal length",
                    () -> m.logits(new int[][] {{1, 2, 3}, {4, 5}}));
            refused("sequence 0 has 257 tokens; expected 1 to 256 (the model's positions)", () -> m.logits(new int[1][257]));
            refused("expected at least one sample; got none", () -> m.fineTune(new int[0][], tuning));
            refused("sample 0 has 1 tokens; expected 2 to 257", () -> m.fineTune(new int[][] {{1}}, tuning));
            refused("3 samples are not a multiple of the micro-batch size 2 x data-parallel size 1 = 2",
                    () -> m.fineTune(new int[3][4], FineTuning.builder().microBatchSize(2).globalBatchSize(2).build()));
            refused("optimizer precision FP16 does not match the model's FLOAT32 parameters", () -> m.fineTune(new int[1][4],
                    FineTuning.builder().optimizer(io.mcore4j.optimizer.OptimizerConfig.builder().fp16(true).build()).build()));
            return null;
        });
        PretrainedGpt closed = InJvmWorld.run(1, rank -> {
            PretrainedGpt m = PretrainedGpt.fromHuggingFace(llama, rank.groups(ParallelDims.of(1, 1, 1)), rank.manager());
            m.close();
            return m;
        }).get(0);
        assertThrows(IllegalStateException.class, () -> closed.logits(new int[][] {{1}}));
    }

    /** Asserts that {@code call} throws an IllegalArgumentException (on a rank, or here) whose message holds {@code expected}. */
    private static String refused(String expected, Runnable call) {
        RuntimeException e = assertThrows(RuntimeException.class, call::run);
        Throwable t = e instanceof InJvmWorld.RankFailedException ? e.getCause() : e;
        assertTrue(t instanceof IllegalArgumentException && t.getMessage().contains(expected),
                "expected: " + expected + "\n got: " + t);
        return t.getMessage();
    }
}
