package io.mcore4j.samples.pretrain;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Pattern;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The flags of Megatron-LM's GPT-3, LLaMA 3 and Mixtral example scripts, at tiny sizes, through
 * {@code pretrain-gpt} in this JVM: each script as written stops at its first refused flag with
 * exit 2 and that flag's one line (never "Unknown option"), and the same script without its refused
 * flags trains its first iteration.
 *
 * <p>Source: NVIDIA/Megatron-LM at commit d98e8a64ddf34856e74b24714e3bedb2f5a39553 (2026-08-22). The
 * sizes, the parallel layout, paths and iteration counts are reduced; every other flag is the
 * script's, in the script's order. The LLaMA 3 script's FP8 flags are its {@code DTYPE=fp8} branch's
 * ({@code --fp8-param-gather} refused).
 */
class MegatronExampleScriptsTest {
    @TempDir
    Path dir;

    /** examples/gpt3/train_gpt3_175b_distributed.sh (TP 8 x PP 16 there, 2 x 2 here). */
    private List<String> gpt3(boolean refused) {
        List<String> f = new ArrayList<>(List.of(
                "--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4", "--seq-length", "16",
                "--max-position-embeddings", "16", "--attention-backend", "auto",
                "--micro-batch-size", "1", "--global-batch-size", "4"));
        if (refused) {
            f.addAll(List.of("--step-batch-size-schedule", "0:16 2.4B:320 4.8B:624 7.2B:928 9.6B:1232 12B:1536"));
        }
        f.addAll(List.of("--train-iters", "1", "--weight-decay", "0.1", "--adam-beta1", "0.9", "--adam-beta2", "0.95",
                "--init-method-std", "0.006", "--clip-grad", "1.0", "--fp16", "--lr", "6.0e-5", "--lr-decay-style", "cosine",
                "--min-lr", "6.0e-6", "--lr-warmup-fraction", ".001", "--lr-decay-iters", "1000",
                "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2"));
        if (refused) {
            f.addAll(List.of("--data-path", "gpt2_text_document", "--vocab-file", "gpt2-vocab.json",
                    "--merge-file", "gpt2-merges.txt"));
        } else {
            f.addAll(List.of("--mock-data", "--vocab-size", "250"));
        }
        f.addAll(List.of("--split", "949,50,1", "--log-interval", "100", "--save-interval", "10000",
                "--eval-interval", "1000", "--save", dir.resolve("gpt3").toString(), "--load", dir.resolve("gpt3").toString(),
                "--eval-iters", "10", "--tensorboard-dir", dir.resolve("gpt3-tb").toString()));
        return ranks(f, 4);
    }

    /** examples/llama/train_llama3_8b_h100_fp8.sh, its mock-data branch (8 ranks of TP 1 there, 2 here). */
    private List<String> llama3(boolean refused) {
        List<String> f = new ArrayList<>(List.of("--use-mcore-models", "--num-layers", "2", "--hidden-size", "32",
                "--ffn-hidden-size", "112", "--num-attention-heads", "4", "--group-query-attention", "--num-query-groups", "2",
                "--kv-channels", "8", "--seq-length", "16", "--max-position-embeddings", "16",
                "--position-embedding-type", "rope", "--rotary-base", "1000000", "--rotary-percent", "1.0",
                "--attention-dropout", "0.0", "--hidden-dropout", "0.0", "--swiglu", "--normalization", "RMSNorm",
                "--init-method-std", "0.0134", "--attention-backend", "fused", "--apply-layernorm-1p"));
        f.addAll(List.of("--untie-embeddings-and-output-weights", "--disable-bias-linear",
                "--micro-batch-size", "1", "--global-batch-size", "4"));
        if (refused) {
            f.addAll(List.of("--train-samples", "4", "--lr-decay-samples", "4", "--lr-warmup-samples", "0"));
        } else {
            f.addAll(List.of("--train-iters", "1"));
        }
        f.addAll(List.of("--lr", "0.00015", "--min-lr", "0.00001"));
        if (refused) {
            f.addAll(List.of("--decoupled-lr", "5.0e-4", "--decoupled-min-lr", "4.5e-5"));
        }
        f.addAll(List.of("--lr-decay-style", "cosine", "--clip-grad", "1.0", "--weight-decay", "0.1", "--adam-beta1", "0.9",
                "--adam-beta2", "0.95", "--bf16", "--grad-reduce-in-bf16", "--cross-entropy-loss-fusion"));
        f.addAll(List.of("--fp8-format", "hybrid", "--fp8-amax-history-len", "1024", "--fp8-amax-compute-algo", "max"));
        if (refused) {
            f.add("--fp8-param-gather");
        }
        if (refused) {
            f.add("--calculate-per-token-loss");
        }
        f.addAll(List.of("--manual-gc", "--empty-unused-memory-level", "1"));
        if (refused) {
            f.addAll(List.of("--exit-duration-in-mins", "235"));
        }
        f.addAll(List.of("--tensor-model-parallel-size", "1", "--context-parallel-size", "1", "--sequence-parallel",
                "--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather",
                "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "250",
                "--data-cache-path", dir.resolve("llama-cache").toString(), "--tiktoken-pattern", "v2", "--split", "99,1,0",
                "--no-create-attention-mask-in-dataloader", "--no-mmap-bin-files", "--num-workers", "1",
                "--log-interval", "1", "--eval-iters", "32", "--eval-interval", "100", "--save-interval", "1000",
                "--log-throughput"));
        if (refused) {
            f.addAll(List.of("--profile", "--profile-step-start", "4", "--profile-step-end", "6",
                    "--ckpt-format", "torch_dist"));
        }
        f.addAll(List.of("--distributed-timeout-minutes", "60", "--save", dir.resolve("llama").toString(),
                "--load", dir.resolve("llama").toString(), "--tensorboard-dir", dir.resolve("llama-tb").toString()));
        return ranks(f, 2);
    }

    /** examples/mixtral/train_mixtral_8x7b_distributed.sh (PP 4, EP 8, 8 experts there; PP 2, EP 2, 4 experts here). */
    private List<String> mixtral(boolean refused) {
        List<String> f = new ArrayList<>(List.of("--use-mcore-models", "--disable-bias-linear", "--seq-length", "16",
                "--max-position-embeddings", "32", "--num-layers", "2", "--hidden-size", "32", "--ffn-hidden-size", "112",
                "--num-attention-heads", "4", "--init-method-std", "0.01", "--attention-dropout", "0.0",
                "--hidden-dropout", "0.0", "--normalization", "RMSNorm", "--position-embedding-type", "rope", "--swiglu",
                "--untie-embeddings-and-output-weights", "--group-query-attention", "--num-query-groups", "2",
                "--no-masked-softmax-fusion", "--no-position-embedding", "--rotary-base", "1000000",
                "--num-experts", "4", "--moe-router-topk", "2", "--moe-router-load-balancing-type", "aux_loss",
                "--moe-aux-loss-coeff", "1e-2", "--moe-grouped-gemm", "--moe-token-dispatcher-type", "alltoall",
                "--overlap-param-gather",
                "--overlap-grad-reduce"));
        if (refused) {
            f.addAll(List.of("--tokenizer-type", "Llama2Tokenizer", "--tokenizer-model", "tokenizer.model",
                    "--data-path", "mixtral_text_document"));
        } else {
            f.addAll(List.of("--mock-data", "--vocab-size", "250"));
        }
        f.addAll(List.of("--split", "99990,8,2", "--micro-batch-size", "1", "--global-batch-size", "4", "--lr", "1e-4",
                "--train-iters", "1", "--lr-decay-iters", "320", "--lr-decay-style", "cosine", "--min-lr", "1.0e-5",
                "--weight-decay", "0.1", "--lr-warmup-iters", "5", "--clip-grad", "1.0", "--bf16",
                "--tensor-model-parallel-size", "1", "--pipeline-model-parallel-size", "2", "--expert-model-parallel-size", "2",
                "--use-distributed-optimizer", "--sequence-parallel",
                "--log-interval", "1", "--save-interval", "10000", "--eval-interval", "1000", "--eval-iters", "10",
                "--save", dir.resolve("mixtral").toString(), "--load", dir.resolve("mixtral").toString(),
                "--tensorboard-dir", dir.resolve("mixtral").resolve("tensorboard").toString()));
        if (refused) {
            f.addAll(List.of("--no-load-optim", "--no-load-rng"));
        }
        return ranks(f, 4);
    }

    private List<String> ranks(List<String> flags, int nproc) {
        flags.addAll(List.of("--nproc", String.valueOf(nproc), "--metrics-dir", dir.resolve("metrics-" + System.nanoTime()).toString()));
        return flags;
    }

    /** pretrain-gpt's exit code, standard output and standard error. */
    private record Run(int exit, String out, String err) {}

    private static Run pretrainGpt(List<String> flags) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        int exit = PretrainGpt.execute("pretrain-gpt", flags.toArray(String[]::new),
                new PrintStream(out, true, StandardCharsets.UTF_8), new PrintStream(err, true, StandardCharsets.UTF_8),
                (args, o) -> PretrainGpt.run(args, o));
        return new Run(exit, out.toString(StandardCharsets.UTF_8), err.toString(StandardCharsets.UTF_8));
    }

    private static void assertRefused(String line, List<String> flags) {
        Run run = pretrainGpt(flags);
        assertEquals(2, run.exit(), run.err());
        assertEquals(List.of("pretrain-gpt: " + line + " ('pretrain-gpt --help' lists the flags)"), run.err().lines().toList());
        assertTrue(!run.err().contains("Unknown option") && !run.err().contains("\tat "), run.err());
    }

    private static void assertTrainsOneIteration(List<String> flags) {
        Run run = pretrainGpt(flags);
        assertEquals(0, run.exit(), run.out() + run.err());
        assertTrue(Pattern.compile(" iteration +1/ +1 \\|").matcher(run.out()).find(), run.out());
    }

    @Test
    void gpt3ScriptStopsAtItsBatchSizeRampUpAndTrainsWithoutIt() {
        assertRefused("--step-batch-size-schedule 0:16 2.4B:320 4.8B:624 7.2B:928 9.6B:1232 12B:1536: batch-size ramp-up"
                + " is not implemented; the global batch is --global-batch-size from the first iteration", gpt3(true));
        List<String> noTokenizer = gpt3(false);
        assertTrainsOneIteration(noTokenizer);
    }

    @Test
    void llama3ScriptStopsAtItsFirstRefusedFlagAndTrainsWithoutThem() {
        assertRefused("--ckpt-format torch_dist: mcore4j does not write Megatron's checkpoint formats; --save writes"
                + " mcore4j's own sharded format (iter_NNNNNNN directories, resharded on --load); drop the flag, or use"
                + " --save-hf for a Hugging Face copy", llama3(true));
        assertTrainsOneIteration(llama3(false));
    }

    @Test
    void mixtralScriptStopsAtItsTokenizerAndTrainsWithoutIt() {
        assertRefused("Invalid value for option '--tokenizer-type': --tokenizer-type Llama2Tokenizer is unknown (expected GPT2BPETokenizer, HuggingFaceTokenizer,"
                + " NullTokenizer or ByteLevel; for a SentencePiece or tiktoken model, HuggingFaceTokenizer reads its"
                + " tokenizer.json)", mixtral(true));
        assertTrainsOneIteration(mixtral(false));
    }
}
