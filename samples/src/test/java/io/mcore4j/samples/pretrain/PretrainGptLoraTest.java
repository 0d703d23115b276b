package io.mcore4j.samples.pretrain;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.data.gpt.GptDatasetBuilder;
import io.mcore4j.data.gpt.GptSplits;
import io.mcore4j.hf.HfCheckpoint;
import io.mcore4j.models.gpt.GptModel;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;
import io.mcore4j.tensorparallel.LoraLinear;
import io.mcore4j.training.gpt.GptPretraining;
import io.mcore4j.training.gpt.GptTrainingSetup;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;

/**
 * {@code pretrain-gpt --peft lora} on the tiny LLaMA fixture of hf-bridge ({@code --load-hf}, its
 * vocabulary of 100 unpadded so that every layout has the same logits): only the
 * adapters change (every base weight bitwise the same after training); TP2 (with and without sequence
 * parallelism) gives the TP1 losses; an adapter-only checkpoint resumed over the same {@code --load-hf}
 * base continues the losses of the uninterrupted run exactly; LoRA flags without {@code --peft lora}
 * are refused in one line.
 */
class PretrainGptLoraTest {
    static final Path LLAMA = Path.of("..", "hf-bridge", "src", "test", "resources", "hf", "llama");

    @TempDir
    Path tmp;

    private List<String> flags(int iters, String... more) {
        List<String> f = new ArrayList<>(List.of("--load-hf", LLAMA.toString(), "--peft", "lora", "--lora-dim", "4",
                "--lora-alpha", "8", "--mock-data", "--seq-length", "16", "--micro-batch-size", "2",
                "--global-batch-size", "4", "--train-iters", String.valueOf(iters), "--lr", "1e-2", "--min-lr", "1e-3",
                "--lr-warmup-iters", "0", "--log-interval", "1", "--make-vocab-size-divisible-by", "1",
                "--metrics-dir", tmp.resolve("metrics").toString(), "--seed", "99"));
        f.addAll(List.of(more));
        return f;
    }

    private List<Double> run(List<String> flags) throws Exception {
        ByteArrayOutputStream text = new ByteArrayOutputStream();
        return PretrainGpt.run(PretrainArgs.parse(flags.toArray(String[]::new)), new PrintStream(text, true, StandardCharsets.UTF_8));
    }

    @Test
    void onlyTheAdaptersChange() throws Exception {
        PretrainArgs args = PretrainArgs.parse(flags(3, "--nproc", "2", "--tensor-model-parallel-size", "2")
                .toArray(String[]::new));
        GptTrainingSetup setup = args.setup();
        Map<String, byte[]> before = new HashMap<>();
        List<String> failures = new ArrayList<>();
        int[] adapters = new int[1];
        try (GptSplits splits = GptDatasetBuilder.create().sequenceLength(16).seed(99).samples(12, 0, 0)
                .mock(args.tokenVocabSize()).build()) {
            InJvmWorld.run(2, Duration.ofMinutes(2), rank -> GptPretraining.run(setup, rank.backend(), rank.manager(),
                    splits.train().orElseThrow(), null, b -> {}, false, new GptPretraining.ModelHooks() {
                        @Override
                        public void beforeTraining(List<GptModel> chunks, ProcessGroups groups) {
                            try (HfCheckpoint ck = HfCheckpoint.open(LLAMA)) {
                                ck.loadInto(chunks);
                            }
                            synchronized (before) {
                                named(chunks, groups).forEach((k, p) -> before.put(k, bytes(p)));
                            }
                        }

                        @Override
                        public void afterTraining(List<GptModel> chunks, ProcessGroups groups) {
                            synchronized (before) {
                                named(chunks, groups).forEach((k, p) -> {
                                    boolean adapter = LoraLinear.isAdapterKey(k.substring(k.indexOf(' ') + 1));
                                    boolean same = java.util.Arrays.equals(before.get(k), bytes(p));
                                    if (adapter == same) {
                                        failures.add(k + (adapter ? " did not change" : " changed"));
                                    }
                                    if (adapter) {
                                        adapters[0]++;
                                        if (!p.isTrainable()) {
                                            failures.add(k + " is frozen");
                                        }
                                    } else if (p.isTrainable() || p.gradient(p.data().getManager()) != null) {
                                        failures.add(k + " is trainable or has a gradient");
                                    }
                                });
                            }
                        }
                    }));
        }
        assertEquals(List.of(), failures);
        // A and B of 4 linears in 2 layers on each of 2 ranks; A of linear_proj/fc2 changes even
        // though B started at zero, because B moved in the first step
        assertEquals(2 * 2 * 4 * 2, adapters[0]);
    }

    private static Map<String, Parameter> named(List<GptModel> chunks, ProcessGroups groups) {
        Map<String, Parameter> out = new HashMap<>();
        for (GptModel m : chunks) {
            m.namedParameters("").forEach((k, p) -> out.put("rank" + groups.worldRank() + " " + k, p));
        }
        return out;
    }

    private static byte[] bytes(Parameter p) {
        return p.data().toType(DataType.FLOAT32, true).toByteArray();
    }

    @Test
    void tensorParallelGivesTheSerialLosses() throws Exception {
        List<Double> serial = run(flags(4));
        for (List<String> layout : List.of(List.of("--nproc", "2", "--tensor-model-parallel-size", "2"),
                List.of("--nproc", "2", "--tensor-model-parallel-size", "2", "--sequence-parallel"))) {
            List<Double> parallel = run(flags(4, layout.toArray(String[]::new)));
            assertEquals(serial.size(), parallel.size());
            for (int i = 0; i < serial.size(); i++) {
                double rel = Math.abs(parallel.get(i) - serial.get(i)) / Math.abs(serial.get(i));
                assertTrue(rel <= 1e-5, layout + " step " + (i + 1) + ": " + parallel.get(i) + " vs " + serial.get(i));
            }
        }
    }

    @Test
    void anAdapterOnlyCheckpointResumesIdentically() throws Exception {
        List<Double> whole = run(flags(4, "--nproc", "2", "--tensor-model-parallel-size", "2"));
        Path ckpt = tmp.resolve("ckpt");
        List<Double> first = run(flags(2, "--nproc", "2", "--tensor-model-parallel-size", "2", "--save", ckpt.toString(),
                "--lr-decay-iters", "4"));
        List<Double> second = run(flags(4, "--nproc", "2", "--tensor-model-parallel-size", "2", "--save",
                ckpt.toString(), "--load", ckpt.toString()));
        List<Double> resumed = new ArrayList<>(first);
        resumed.addAll(second);
        assertEquals(whole, resumed);
        String saved = checkpointText(ckpt);
        assertTrue(saved.contains("adapter.linear_in.weight") && saved.contains("adapter.linear_out.weight"), saved);
        assertFalse(saved.contains("linear_qkv.weight\"") || saved.contains("word_embeddings.weight"),
                "the checkpoint holds base weights");
    }

    private static String checkpointText(Path dir) throws IOException {
        StringBuilder out = new StringBuilder();
        try (Stream<Path> files = Files.walk(dir)) {
            for (Path f : files.filter(p -> p.toString().endsWith(".json")).toList()) {
                out.append(Files.readString(f, StandardCharsets.UTF_8));
            }
        }
        return out.toString();
    }

    @Test
    void loraFlagsWithoutPeftLoraAreRefused() {
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        int code = PretrainGpt.execute("pretrain-gpt", new String[] {"--mock-data", "--lora-dim", "8"},
                new PrintStream(new ByteArrayOutputStream(), true, StandardCharsets.UTF_8),
                new PrintStream(err, true, StandardCharsets.UTF_8), (a, o) -> {});
        assertEquals(2, code);
        assertTrue(err.toString(StandardCharsets.UTF_8).startsWith("pretrain-gpt: --lora-dim needs --peft lora"), err.toString());
        IllegalArgumentException bad = org.junit.jupiter.api.Assertions.assertThrows(IllegalArgumentException.class,
                () -> PretrainArgs.parse("--mock-data", "--peft", "lora", "--lora-target-modules", "linear_qkv,q_proj").setup());
        assertEquals("LoRA target module 'q_proj' is not one of linear_qkv, linear_proj, linear_fc1, linear_fc2",
                bad.getMessage());
        IllegalArgumentException noBase = org.junit.jupiter.api.Assertions.assertThrows(IllegalArgumentException.class,
                () -> PretrainArgs.parse("--mock-data", "--peft", "lora", "--load", "ckpt").setup());
        assertEquals("--peft lora with --load ckpt needs --load-hf (the base model's weights): a LoRA checkpoint holds"
                + " the adapters alone", noBase.getMessage());
    }
}
