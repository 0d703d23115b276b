package io.mcore4j.samples.generate;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.tensorparallel.MlpActivation;
import io.mcore4j.checkpoint.CheckpointManager;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.data.tokenizer.ByteLevelTokenizer;
import io.mcore4j.inference.Completion;
import io.mcore4j.inference.Generator;
import io.mcore4j.inference.SamplingParams;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.gpt.GptModel;
import io.mcore4j.models.transformer.LayerSpec;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * generate-gpt end to end on CPU: a small GPT saved at TP2 as pretrain-gpt saves it, loaded at TP1, TP2
 * and PP2, prints the completions the in-memory model generates; its flags and errors.
 */
class GenerateGptTest {
    private static final List<String> PROMPTS = List.of("class ", "mcore4j is");

    @Test
    void helpListsTheFlags() {
        Output o = run("--help");
        assertEquals(0, o.code);
        for (String flag : List.of("--load", "--prompts", "--num-tokens-to-generate", "--greedy", "--temperature", "--top_k",
                "--top_p", "--seed", "--tokenizer-model", "--tensor-model-parallel-size", "--pipeline-model-parallel-size")) {
            assertTrue(o.text.contains(flag), flag + " missing from --help:\n" + o.text);
        }
        assertEquals(2, run("--prompts", "x").code, "--load is required");
    }

    @Test
    void printsTheModelsCompletionsAtAnyLayout(@TempDir Path dir) {
        TransformerConfig gpt = TransformerConfig.builder(2, 32, 4, 384).maxSequenceLength(32).dropout(0, 0).initStd(0.1).build();
        TransformerConfig llama = gpt.toBuilder().queryGroups(2).positionEmbedding(TransformerConfig.PositionEmbedding.ROPE)
                .activation(MlpActivation.SWIGLU).addBiasLinear(false).tiedEmbeddings(false)
                .normalization(TransformerConfig.Normalization.RMS_NORM, 1e-5).build();
        for (TransformerConfig c : List.of(gpt, llama)) {
            Path run = dir.resolve(c.positionEmbedding().name());
            List<String> expected = saveAndGenerate(c, run, SamplingParams.greedy(6));
            for (String[] layout : List.of(new String[] {"1", "1"}, new String[] {"2", "1"}, new String[] {"1", "2"})) {
                Output o = run("--load", run.toString(), "--prompts", PROMPTS.get(0), PROMPTS.get(1), "--greedy",
                        "--num-tokens-to-generate", "6", "--seq-length", "32", "--tensor-model-parallel-size", layout[0],
                        "--pipeline-model-parallel-size", layout[1]);
                assertEquals(0, o.code, o.text);
                for (int i = 0; i < PROMPTS.size(); i++) {
                    assertTrue(o.text.contains("prompt " + i + ": " + PROMPTS.get(i)), o.text);
                    assertTrue(o.text.contains(expected.get(i)), "TP" + layout[0] + " PP" + layout[1] + " " + c.positionEmbedding()
                            + ": expected\n" + expected.get(i) + "\nin\n" + o.text);
                }
            }
        }
    }

    /** Sampling draws among the tokenizer's 257 ids only, though the model's vocabulary is padded to 384. */
    @Test
    void samplesWithTheGivenSeedAtAnyLayout(@TempDir Path dir) {
        TransformerConfig c = TransformerConfig.builder(2, 32, 4, 384).maxSequenceLength(32).dropout(0, 0).initStd(0.1).build();
        List<String> expected = saveAndGenerate(c, dir, SamplingParams.sample(0.9, 20, 0.95, 6, 5));
        for (String tp : List.of("1", "2")) {
            Output o = run("--load", dir.toString(), "--prompts", PROMPTS.get(0), PROMPTS.get(1), "--temperature", "0.9",
                    "--top_k", "20", "--top_p", "0.95", "--seed", "5", "--num-tokens-to-generate", "6",
                    "--tensor-model-parallel-size", tp);
            assertEquals(0, o.code, o.text);
            for (int i = 0; i < PROMPTS.size(); i++) {
                assertTrue(o.text.contains(expected.get(i)), "TP" + tp + ": expected\n" + expected.get(i) + "\nin\n" + o.text);
            }
        }
    }

    /** Saves the model at TP2 under {@code run} and returns the completion lines the in-memory model gives. */
    private static List<String> saveAndGenerate(TransformerConfig c, Path run, SamplingParams params) {
        ByteLevelTokenizer tokenizer = new ByteLevelTokenizer();
        List<int[]> prompts = new ArrayList<>();
        PROMPTS.forEach(p -> prompts.add(tokenizer.encode(p)));
        return InJvmWorld.run(2, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.of(2, 2, 1));
            GptModel model = GptModel.build(ModelContext.create(c, groups, rank.manager(), new SeedScheme(7)),
                    LayerSpec.tensorParallel(), new int[] {0, 1}, true, true);
            new CheckpointManager(run, 2).save(3, model.shardedState("model."), Map.of("iteration", 3), groups.world());
            List<Completion> completions = new Generator(model, ByteLevelTokenizer.VOCABULARY_SIZE, ByteLevelTokenizer.END_OF_DOCUMENT)
                    .generate(prompts, params);
            List<String> lines = new ArrayList<>();
            for (int i = 0; i < completions.size(); i++) {
                Completion k = completions.get(i);
                lines.add("completion " + i + " (" + k.tokens().length + " tokens, " + k.finishReason() + "): "
                        + tokenizer.decode(k.tokens()));
            }
            return lines;
        }).get(0);
    }

    private record Output(int code, String text) {}

    private static Output run(String... argv) {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        PrintStream out = new PrintStream(bytes, true, StandardCharsets.UTF_8);
        int code = GenerateGpt.run(out, argv);
        return new Output(code, bytes.toString(StandardCharsets.UTF_8));
    }
}
