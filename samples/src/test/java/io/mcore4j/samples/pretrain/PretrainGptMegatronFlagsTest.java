package io.mcore4j.samples.pretrain;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.stream.Stream;

import io.mcore4j.data.sampler.DataloaderType;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.tensorparallel.MlpActivation;
import io.mcore4j.models.transformer.AttentionBackend;
import io.mcore4j.training.gpt.GptTrainingSetup;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Megatron-LM's training flags in pretrain-gpt one by one (issue #38): what each accepted flag sets,
 * the one line and exit 2 of each refused one, and the run-level ones (--dataloader-type cyclic,
 * --save-retain, the message of a resumed run with nothing left).
 */
class PretrainGptMegatronFlagsTest {
    @TempDir
    Path dir;

    private static final List<String> BASE = List.of("--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4",
            "--seq-length", "16", "--micro-batch-size", "2", "--global-batch-size", "4", "--mock-data", "--vocab-size", "250",
            "--make-vocab-size-divisible-by", "64", "--log-interval", "1", "--seed", "5");

    private static GptTrainingSetup setup(String... more) {
        return PretrainArgs.parse(Stream.concat(BASE.stream(), Arrays.stream(more)).toArray(String[]::new)).setup();
    }

    /** The first line pretrain-gpt prints on standard error for these flags, after checking it exits with 2. */
    private static String refusal(String... more) {
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        int exit = PretrainGpt.execute("pretrain-gpt", Stream.concat(BASE.stream(), Arrays.stream(more)).toArray(String[]::new),
                new PrintStream(new ByteArrayOutputStream(), true, StandardCharsets.UTF_8),
                new PrintStream(err, true, StandardCharsets.UTF_8), (args, out) -> {
                    throw new AssertionError("no run expected");
                });
        String text = err.toString(StandardCharsets.UTF_8);
        assertEquals(2, exit, text);
        assertEquals(1, text.lines().count(), "one line: " + text);
        String suffix = " ('pretrain-gpt --help' lists the flags)";
        String line = text.lines().findFirst().orElse("");
        assertTrue(line.startsWith("pretrain-gpt: ") && line.endsWith(suffix), line);
        return line.substring("pretrain-gpt: ".length(), line.length() - suffix.length());
    }

    private List<String> run(int iterations, String... more) {
        List<String> f = new ArrayList<>(BASE);
        f.addAll(List.of("--nproc", "2", "--train-iters", String.valueOf(iterations), "--lr", "1e-3", "--min-lr", "1e-4",
                "--metrics-dir", dir.resolve("metrics-" + System.nanoTime()).toString()));
        f.addAll(List.of(more));
        return f;
    }

    private static String console(List<String> flags) throws Exception {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        PretrainGpt.run(PretrainArgs.parse(flags.toArray(String[]::new)), new PrintStream(out, true, StandardCharsets.UTF_8));
        return out.toString(StandardCharsets.UTF_8);
    }

    private static List<Double> losses(List<String> flags) throws Exception {
        return PretrainGpt.run(PretrainArgs.parse(flags.toArray(String[]::new)),
                new PrintStream(new ByteArrayOutputStream(), true, StandardCharsets.UTF_8));
    }

    @Test
    void tpCommOverlapNeedsSequenceParallelismAtTensorParallelSizeAboveOne() {
        assertTrue(setup("--tensor-model-parallel-size", "2", "--sequence-parallel", "--tp-comm-overlap").model().tpCommOverlap());
        assertFalse(setup("--tensor-model-parallel-size", "2", "--sequence-parallel").model().tpCommOverlap());
        assertEquals("--tp-comm-overlap overlaps the sequence-parallel all-gathers and reduce-scatters with the GEMMs:"
                + " it needs --sequence-parallel", refusal("--tensor-model-parallel-size", "2", "--tp-comm-overlap"));
        // Megatron turns --sequence-parallel off at TP 1 and then asserts it for the overlap
        assertEquals("--tp-comm-overlap needs --tensor-model-parallel-size > 1 (got 1, at which --sequence-parallel is off)",
                refusal("--sequence-parallel", "--tp-comm-overlap"));
    }

    @Test
    void gradientAccumulationFusionIsOnUnlessMegatronsFlagTurnsItOff() {
        assertTrue(setup("--tensor-model-parallel-size", "2").model().gradientAccumulationFusion());
        assertFalse(setup("--tensor-model-parallel-size", "2", "--no-gradient-accumulation-fusion").model()
                .gradientAccumulationFusion());
    }

    @Test
    void theIssuesFlagsAreAcceptedWithMegatronsMeaning() {
        GptTrainingSetup s = setup("--use-mcore-models", "--transformer-impl", "transformer_engine", "--use-flash-attn",
                "--init-method-std", "0.006", "--dataloader-type", "cyclic", "--tokenizer-type", "NullTokenizer",
                "--group-query-attention", "--num-query-groups", "2", "--moe-router-load-balancing-type", "aux_loss",
                "--kv-channels", "16", "--rotary-base", "500000", "--rotary-percent", "0.5", "--position-embedding-type", "rope");
        assertEquals(0.006, s.model().initStd());
        assertEquals(AttentionBackend.FLASH, s.attention());
        assertEquals(DataloaderType.CYCLIC, s.dataloaderType());
        assertEquals(2, s.model().numQueryGroups());
        assertEquals(16, s.model().kvChannels());
        assertEquals(500000, s.model().rotaryBase());
        assertEquals(0.5, s.model().rotaryPercent());
        // Megatron's defaults
        GptTrainingSetup d = setup();
        assertEquals(0.02, d.model().initStd());
        assertEquals(DataloaderType.SINGLE, d.dataloaderType());
        assertEquals(AttentionBackend.AUTO, d.attention());
        assertEquals(1, setup("--group-query-attention").model().numQueryGroups(), "Megatron's --num-query-groups default");
        assertEquals(AttentionBackend.UNFUSED, setup("--transformer-impl", "local").attention());
        assertEquals(5, setup("--train-iters", "100", "--lr-decay-iters", "50", "--lr-warmup-fraction", "0.1")
                .training().lrSchedule().warmupSteps());
        assertFalse(setup("--bf16", "--grad-reduce-in-bf16").optimizer().gradReduceInFp32());
        assertFalse(setup().optimizer().averageInCollective(), "Megatron divides before a summing collective by default");
        assertTrue(setup("--ddp-average-in-collective").optimizer().averageInCollective());
        assertFalse(setup("--sequence-parallel").model().sequenceParallel(), "off at TP 1, as in Megatron");
        assertTrue(setup("--qk-layernorm").model().qkLayernorm());
        assertFalse(setup().model().qkLayernorm());
        assertEquals(0, setup("--num-experts", "2", "--moe-aux-loss-coeff", "0.01", "--moe-router-load-balancing-type", "none")
                .model().moe().auxLossCoeff());
        assertEquals(0.01, setup("--num-experts", "2", "--moe-aux-loss-coeff", "0.01").model().moe().auxLossCoeff());
    }

    /** Megatron's --norm-epsilon sets both norm kinds' epsilon (1e-5 without it); with --load-hf the config.json decides. */
    @Test
    void normEpsilonSetsEveryNorm() {
        assertEquals(1e-5, setup().model().normEpsilon());
        assertEquals(1e-6, setup("--norm-epsilon", "1e-6").model().normEpsilon());
        assertEquals(1e-6, setup("--normalization", "RMSNorm", "--norm-epsilon", "1e-6").model().normEpsilon());
        assertEquals(TransformerConfig.Normalization.RMS_NORM,
                setup("--normalization", "RMSNorm", "--norm-epsilon", "1e-6").model().normalization());
        assertEquals("--norm-epsilon 0.0 must be positive and finite", refusal("--norm-epsilon", "0"));
        Path hf = Path.of("..", "hf-bridge", "src", "test", "resources", "hf", "llama");
        double stored = setup("--load-hf", hf.toString()).model().normEpsilon();
        assertEquals(stored, setup("--load-hf", hf.toString(), "--norm-epsilon", String.valueOf(stored)).model().normEpsilon());
        assertEquals("--norm-epsilon 0.5 with --load-hf " + hf + ": the model's norms come from its config.json, whose"
                + " epsilon is " + stored + "; drop the flag", refusal("--load-hf", hf.toString(), "--norm-epsilon", "0.5"));
    }

    /**
     * Megatron's sliding-window flags (its int and list forms) and zero-centred norms, and mcore4j's flags for the
     * rest of Gemma's layer: what each sets, and the one line of a value that cannot be honoured.
     */
    @Test
    void windowAndGemmaLayerFlagsSetTheModel() {
        TransformerConfig m = setup("--window-size", "3,0", "--window-attn-skip-freq", "2", "--apply-layernorm-1p",
                "--post-self-attn-layernorm", "--post-mlp-layernorm", "--geglu", "--scale-embeddings-by-sqrt-hidden",
                "--softmax-scale", "0.25", "--position-embedding-type", "rope", "--local-rotary-base", "20000",
                "--normalization", "RMSNorm", "--qk-layernorm").model();
        assertEquals(List.of(3, -1), List.of(m.windowSize(0), m.windowSize(1)), "layer 2 of every 2 (1-based) global");
        assertTrue(m.layernormZeroCenteredGamma() && m.postSelfAttnLayernorm() && m.postMlpLayernorm()
                && m.scaleEmbeddingsBySqrtHidden() && m.qkLayernorm());
        assertEquals(MlpActivation.GEGLU_TANH, m.activation());
        assertEquals(0.25, m.softmaxScale());
        assertEquals(List.of(20000.0, 10000.0), List.of(m.rotaryBase(0), m.rotaryBase(1)));
        TransformerConfig pattern = setup("--window-size", "(5,0)", "--window-attn-skip-freq", "([0]+[1])*1").model();
        assertEquals(List.of(-1, 5), List.of(pattern.windowSize(0), pattern.windowSize(1)));
        assertEquals(List.of(7, 7), List.of(setup("--window-size", "7,0").model().windowSize(0),
                setup("--window-size", "7,0").model().windowSize(1)));
        assertEquals("--window-size 3,2: only causal windows (RIGHT 0) are implemented", refusal("--window-size", "3,2"));
        assertEquals("--window-attn-skip-freq 2 needs --window-size", refusal("--window-attn-skip-freq", "2"));
        assertEquals("--window-attn-skip-freq [1]*3 has 3 entries for 2 layers",
                refusal("--window-size", "3,0", "--window-attn-skip-freq", "[1]*3"));
        assertEquals("--geglu and --swiglu exclude each other (give one)", refusal("--geglu", "--swiglu"));
        assertEquals("--local-rotary-base 20000.0 is the RoPE base of the --window-size layers: it needs --window-size",
                refusal("--position-embedding-type", "rope", "--local-rotary-base", "20000"));
        // with --load-hf the model is its config.json's: a layer flag it contradicts is refused, one it agrees with kept
        Path hf = Path.of("..", "hf-bridge", "src", "test", "resources", "hf");
        assertEquals("--geglu, --window-size 3,0 (layer 0) with --load-hf " + hf.resolve("llama") + ": the model comes from"
                + " its config.json (LlamaForCausalLM), which disagrees; drop the flag",
                refusal("--load-hf", hf.resolve("llama").toString(), "--geglu", "--window-size", "3,0"));
        assertEquals(3, setup("--load-hf", hf.resolve("mistral").toString(), "--window-size", "3,0").model().windowSize(1));
    }

    private static final List<String> MLA = List.of("--multi-latent-attention", "--position-embedding-type", "rope",
            "--q-lora-rank", "16", "--kv-lora-rank", "8", "--qk-head-dim", "8", "--qk-pos-emb-head-dim", "4", "--v-head-dim",
            "6", "--rotary-scaling-factor", "4", "--mscale", "1", "--mscale-all-dim", "0.8",
            "--original-max-position-embeddings", "8");

    /** Megatron's multi-latent attention and YaRN flags: what they set, and the one line of what cannot be honoured. */
    @Test
    void multiLatentAttentionFlagsSetTheModel() {
        TransformerConfig m = setup(MLA.toArray(String[]::new)).model();
        assertEquals(new TransformerConfig.MlaDims(16, 8, 8, 4, 6), m.multiLatentAttention());
        assertEquals(TransformerConfig.RopeScaling.yarn(4, 8, 32, 1, 1, 0.8), m.ropeScaling());
        TransformerConfig defaults = setup("--multi-latent-attention", "--position-embedding-type", "rope",
                "--num-attention-heads", "2").model();
        assertEquals(new TransformerConfig.MlaDims(0, 32, 128, 64, 128), defaults.multiLatentAttention(), "Megatron's defaults");
        assertEquals(null, defaults.ropeScaling(), "YaRN with --rotary-scaling-factor 1 is RoPE");
        assertEquals("--kv-lora-rank 8, --rope-type yarn apply to multi-latent attention: add --multi-latent-attention",
                refusal("--kv-lora-rank", "8", "--rope-type", "yarn"));
        assertEquals("--multi-latent-attention rotates part of every head: it needs --position-embedding-type rope",
                refusal("--multi-latent-attention"));
        assertEquals("--mscale 0.5 with --rope-type rope: YaRN's flags need --rope-type yarn",
                refusal("--multi-latent-attention", "--position-embedding-type", "rope", "--rope-type", "rope", "--mscale", "0.5"));
        assertEquals("--multi-latent-attention with --load-hf " + Path.of("..", "hf-bridge", "src", "test", "resources", "hf",
                "llama") + ": the attention comes from the checkpoint's config.json; drop the flag",
                refusal("--load-hf", Path.of("..", "hf-bridge", "src", "test", "resources", "hf", "llama").toString(),
                        "--multi-latent-attention"));
    }

    /** With {@link #MLA}, DeepSeek-V3's pattern at EP2: layer 0 dense, layer 1 of 4 experts as described below. */
    private static final List<String> DEEPSEEK_EXPERTS = List.of("--expert-model-parallel-size", "2", "--swiglu",
            "--normalization", "RMSNorm", "--disable-bias-linear", "--num-experts", "4", "--moe-router-topk", "2",
            "--moe-layer-freq", "[0]+[1]", "--moe-ffn-hidden-size", "16", "--moe-router-score-function", "sigmoid",
            "--moe-router-enable-expert-bias", "--moe-router-num-groups", "2", "--moe-router-group-topk", "1",
            "--moe-router-topk-scaling-factor", "2.5", "--moe-shared-expert-intermediate-size", "16", "--hidden-dropout",
            "0", "--attention-dropout", "0");

    /**
     * The DeepSeek-V3 pattern at a tiny size trains: multi-latent attention with YaRN, layer 0 dense, layer 1 of 4
     * experts top-2 with sigmoid scores, an expert bias, 2 groups of which each token keeps 1, scaling 2.5 and a shared
     * expert, at EP2.
     */
    @Test
    void deepSeekShapedModelTrainsAtEp2() throws Exception {
        List<String> flags = new ArrayList<>(MLA);
        flags.addAll(DEEPSEEK_EXPERTS);
        List<Double> losses = losses(run(2, flags.toArray(String[]::new)));
        assertEquals(2, losses.size());
        assertTrue(losses.stream().allMatch(l -> Double.isFinite(l) && l > 0), losses.toString());
    }

    /**
     * The same DeepSeek-V3 pattern with one multi-token prediction depth (an MoE layer, as the last decoder layer) trains
     * at EP2 and logs {@code mtp_1 loss}; a LLaMA-shaped model with a depth, trained at TP2, saves a checkpoint that
     * export-hf writes as LlamaForCausalLM without the depth (the architecture has no place for it; DeepSeek-V3's export
     * of the depths is hf-bridge's MultiTokenPredictionBridgeTest) and that generate-gpt completes from, the depth unread.
     */
    @Test
    void multiTokenPredictionTrainsAtEp2AndItsCheckpointExportsAndGenerates() throws Exception {
        List<String> flags = new ArrayList<>(MLA);
        flags.addAll(DEEPSEEK_EXPERTS);
        flags.addAll(List.of("--mtp-num-layers", "1"));
        String text = console(run(2, flags.toArray(String[]::new)));
        assertTrue(text.contains("| mtp_1 loss "), text);
        Path checkpoint = dir.resolve("mtp-checkpoint");
        console(run(2, "--tensor-model-parallel-size", "2", "--swiglu", "--normalization", "RMSNorm",
                "--position-embedding-type", "rope", "--disable-bias-linear", "--mtp-num-layers", "1", "--save",
                checkpoint.toString(), "--save-interval", "2"));
        Path exported = dir.resolve("mtp-export");
        assertEquals(0, new picocli.CommandLine(new io.mcore4j.samples.hf.ExportHf()).execute("--load",
                checkpoint.toString(), "--save-hf", exported.toString()));
        try (io.mcore4j.hf.HfCheckpoint ck = io.mcore4j.hf.HfCheckpoint.open(exported)) {
            assertEquals(io.mcore4j.hf.HfArchitecture.LLAMA, ck.config().architecture());
            assertTrue(ck.tensorNames().stream().noneMatch(n -> n.contains("enorm") || n.contains("eh_proj")),
                    ck.tensorNames().toString());
        }
        ByteArrayOutputStream generated = new ByteArrayOutputStream();
        PrintStream out = new PrintStream(generated, true, StandardCharsets.UTF_8);
        assertEquals(0, io.mcore4j.samples.generate.GenerateGpt.run(out, out, "--load", checkpoint.toString(), "--prompts",
                "ab", "--greedy", "--num-tokens-to-generate", "3"), generated.toString(StandardCharsets.UTF_8));
    }

    /** A Gemma-shaped model (windows interleaved, its norms, GeGLU, scales) trains at TP2 on the fused attention. */
    @Test
    void gemmaShapedModelTrainsAtTp2() throws Exception {
        List<Double> losses = losses(run(2, "--tensor-model-parallel-size", "2", "--window-size", "3,0",
                "--window-attn-skip-freq", "2", "--apply-layernorm-1p", "--post-self-attn-layernorm", "--post-mlp-layernorm",
                "--geglu", "--scale-embeddings-by-sqrt-hidden", "--softmax-scale", "0.25", "--position-embedding-type", "rope",
                "--local-rotary-base", "20000", "--normalization", "RMSNorm", "--qk-layernorm", "--attention-backend", "fused",
                "--hidden-dropout", "0", "--attention-dropout", "0"));
        assertEquals(2, losses.size());
        assertTrue(losses.stream().allMatch(l -> Double.isFinite(l) && l > 0), losses.toString());
    }

    @Test
    void refusedFlagsSayWhatMcore4jDoesInsteadInOneLine() {
        assertEquals("--ckpt-format torch_dist: mcore4j does not write Megatron's checkpoint formats; --save writes"
                + " mcore4j's own sharded format (iter_NNNNNNN directories, resharded on --load); drop the flag, or use"
                + " --save-hf for a Hugging Face copy", refusal("--ckpt-format", "torch_dist"));
        assertEquals("--init-method-xavier-uniform: only normal initialisation is implemented; use --init-method-std",
                refusal("--init-method-xavier-uniform"));
        assertEquals("--moe-router-load-balancing-type sinkhorn: mcore4j implements aux_loss, seq_aux_loss, global_aux_loss"
                + " and none", refusal("--num-experts", "2", "--moe-router-load-balancing-type", "sinkhorn"));
        assertEquals("--save-retain-interval 100: keeping every n-th checkpoint is not implemented; --save-retain N keeps"
                + " the N newest (0: all)", refusal("--save-retain-interval", "100"));
        assertEquals("--transformer-impl local composes attention from tensor ops but --use-flash-attn asks for the fused"
                + " kernel (use --transformer-impl transformer_engine, or drop it)",
                refusal("--transformer-impl", "local", "--use-flash-attn"));
        assertEquals("--use-flash-attn asks for --attention-backend flash but --attention-backend is unfused (give one"
                + " of them)", refusal("--use-flash-attn", "--attention-backend", "unfused"));
        assertEquals("--no-position-embedding is deprecated, use --position-embedding-type (it is learned_absolute)",
                refusal("--no-position-embedding"));
        assertEquals("--lr-warmup-fraction 0.001 of 100 decay iterations is 0.100000 iterations; mcore4j warms up over"
                + " whole iterations in [0, 100] (use --lr-warmup-iters)", refusal("--train-iters", "100",
                "--lr-warmup-fraction", "0.001"));
        assertEquals("--init-method-std 0.0 must be positive", refusal("--init-method-std", "0"));
        assertEquals("--train-samples 1000: training is counted in iterations; use --train-iters (--train-samples /"
                + " --global-batch-size)", refusal("--train-samples", "1000"));
        assertTrue(refusal("--dataloader-type", "external").startsWith("Invalid value for option '--dataloader-type':"
                + " expected one of [single, cyclic]"));
    }

    @Test
    void cyclicDataloaderReadsOtherSamplesThanSingleAndTheSameOnEveryRun() throws Exception {
        List<Double> single = losses(run(4));
        List<Double> cyclic = losses(run(4, "--dataloader-type", "cyclic"));
        assertEquals(4, cyclic.size());
        assertNotEquals(single, cyclic, "a random order gives other batches, so other losses");
        assertEquals(cyclic, losses(run(4, "--dataloader-type", "cyclic")));
    }

    @Test
    void aResumedRunWithNothingLeftSaysSo() throws Exception {
        Path save = dir.resolve("done");
        console(run(2, "--save", save.toString()));
        String again = console(run(2, "--load", save.toString(), "--save", save.toString()));
        assertTrue(again.contains("nothing left to train: the checkpoint is at iteration 2 and --train-iters is 2"), again);
        assertFalse(again.contains("iterations 3 to 2"), again);
    }

    @Test
    void saveRetainKeepsTheNewestCheckpoints() throws Exception {
        assertEquals(List.of("iter_0000003", "iter_0000004"), checkpointsAfter("default"));
        assertEquals(List.of("iter_0000002", "iter_0000003", "iter_0000004"), checkpointsAfter("three", "--save-retain", "3"));
        assertEquals(List.of("iter_0000001", "iter_0000002", "iter_0000003", "iter_0000004"),
                checkpointsAfter("all", "--save-retain", "0"));
    }

    private List<String> checkpointsAfter(String name, String... retain) throws Exception {
        Path save = dir.resolve(name);
        List<String> f = run(4, "--save", save.toString(), "--save-interval", "1");
        f.addAll(List.of(retain));
        losses(f);
        try (Stream<Path> entries = Files.list(save)) {
            return entries.map(p -> p.getFileName().toString()).filter(n -> n.startsWith("iter_")).sorted().toList();
        } catch (IOException e) {
            throw new AssertionError(e);
        }
    }
}
