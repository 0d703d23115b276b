package io.mcore4j.samples.pretrain;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.checkpoint.CheckpointManager;
import io.mcore4j.checkpoint.DistCheckpointing;
import io.mcore4j.hf.HfConfig;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.samples.generate.GenerateGpt;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A pretrain-gpt checkpoint records the model as a Hugging Face config where one describes it, so that
 * {@code generate-gpt --load} rebuilds options no tensor shape records (here a Gemma-shaped model: windows on every
 * other layer, zero-centred norms, post norms, GeGLU, scales, a local rotary base) without being told them again.
 */
class PretrainGptCheckpointConfigTest {
    @TempDir
    Path dir;

    private static final List<String> GEMMA = List.of("--num-layers", "2", "--hidden-size", "32", "--num-attention-heads",
            "4", "--seq-length", "16", "--micro-batch-size", "2", "--global-batch-size", "4", "--mock-data", "--vocab-size",
            "250", "--make-vocab-size-divisible-by", "64", "--seed", "5", "--window-size", "3,0", "--window-attn-skip-freq",
            "2", "--apply-layernorm-1p", "--post-self-attn-layernorm", "--post-mlp-layernorm", "--geglu",
            "--scale-embeddings-by-sqrt-hidden", "--softmax-scale", "0.25", "--position-embedding-type", "rope",
            "--local-rotary-base", "20000", "--normalization", "RMSNorm", "--qk-layernorm", "--hidden-dropout", "0",
            "--attention-dropout", "0", "--disable-bias-linear", "--lr", "1e-3", "--train-iters", "1", "--init-method-std", "0.2");

    @Test
    void generateGptLoadRebuildsTheOptionsTheShapesDoNotRecord() throws Exception {
        Path save = dir.resolve("ckpt");
        Path hf = dir.resolve("hf");
        List<String> flags = new ArrayList<>(GEMMA);
        flags.addAll(List.of("--save", save.toString(), "--save-hf", hf.toString(), "--metrics-dir", dir.resolve("m").toString()));
        PretrainGpt.run(PretrainArgs.parse(flags.toArray(String[]::new)),
                new PrintStream(new ByteArrayOutputStream(), true, StandardCharsets.UTF_8));

        Path checkpoint = new CheckpointManager(save, 1).latest().orElseThrow();
        HfConfig recorded = HfConfig.recordedIn(checkpoint, DistCheckpointing.loadCommonState(checkpoint));
        TransformerConfig trained = PretrainArgs.parse(GEMMA.toArray(String[]::new)).setup().model();
        TransformerConfig rebuilt = recorded.transformerConfig();
        assertEquals(List.of(trained.windowSize(0), trained.windowSize(1)), List.of(rebuilt.windowSize(0), rebuilt.windowSize(1)));
        assertEquals(List.of(trained.rotaryBase(0), trained.rotaryBase(1)), List.of(rebuilt.rotaryBase(0), rebuilt.rotaryBase(1)));
        assertTrue(rebuilt.layernormZeroCenteredGamma() && rebuilt.postSelfAttnLayernorm() && rebuilt.postMlpLayernorm()
                && rebuilt.scaleEmbeddingsBySqrtHidden() && rebuilt.qkLayernorm());
        assertEquals(trained.activation(), rebuilt.activation());
        assertEquals(trained.softmaxScale(), rebuilt.softmaxScale(), 1e-12);

        String fromCheckpoint = generate("--load", save.toString());
        String fromHf = generate("--load-hf", hf.toString());
        assertTrue(fromCheckpoint.contains("(Gemma3ForCausalLM)"), fromCheckpoint);
        assertEquals(completions(fromHf), completions(fromCheckpoint));
    }

    private static String generate(String... source) {
        List<String> argv = new ArrayList<>(List.of(source));
        argv.addAll(List.of("--prompts", "class ", "mcore4j is", "--greedy", "--num-tokens-to-generate", "6"));
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        int code = GenerateGpt.run(new PrintStream(bytes, true, StandardCharsets.UTF_8), argv.toArray(String[]::new));
        String text = bytes.toString(StandardCharsets.UTF_8);
        assertEquals(0, code, text);
        return text;
    }

    private static List<String> completions(String text) {
        return text.lines().filter(l -> l.startsWith("completion ")).toList();
    }
}
