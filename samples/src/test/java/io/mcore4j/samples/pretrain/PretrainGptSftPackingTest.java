package io.mcore4j.samples.pretrain;

import static io.mcore4j.samples.pretrain.PretrainRuns.refusal;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.data.gpt.GptSplits;
import io.mcore4j.data.gpt.SplitWeights;
import io.mcore4j.data.sft.SftDatasetBuilder;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * {@code pretrain-gpt --sft --packing} on the tiny Qwen2 and LLaMA fixtures (data's test resources): a micro-batch of
 * the packed rows that hold every conversation gives the loss of an unpacked micro-batch of the same conversations
 * (both are the mean over the micro-batch's assistant tokens; the unpacked loss is the one PretrainGptSftTest checks
 * against transformers), within 1e-5, at TP1, TP2 (with sequence parallelism), CP2 (each conversation padded to a
 * multiple of 4 and split per sequence) and with LoRA, for the first iteration and, after one optimizer step on the
 * same data, the second; the log line says the rows are fewer and fuller; bad combinations are refused with one line.
 */
class PretrainGptSftPackingTest {
    private static final Pattern SHARE = Pattern.compile(
            "(?m)^sft train: (\\d+) conversations in (\\d+) samples of (\\d+) positions, (\\d+\\.\\d)% of them conversation tokens$");
    private static final int[] WORDS = {3, 70, 12, 1, 6, 8, 0, 2, 10, 5};
    private static final int SEQ = 256;

    @TempDir
    Path tmp;

    /** What one run logged and the losses it returned. */
    private record Run(List<Double> losses, String out) {
        Matcher share() {
            Matcher m = SHARE.matcher(out);
            assertTrue(m.find(), out);
            return m;
        }
    }

    private Path chats() throws Exception {
        List<String> lines = new ArrayList<>();
        for (int k = 0; k < WORDS.length; k++) {
            lines.add("{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\":"
                    + " \"Question " + k + ".\"}, {\"role\": \"assistant\", \"content\": \"" + "ok ".repeat(WORDS[k]) + "done.\"}]}");
        }
        Path data = tmp.resolve("chats.jsonl");
        Files.write(data, lines);
        return data;
    }

    private List<String> flags(String model, Path data, int samplesPerBatch, String... more) {
        Path dir = PretrainGptSftTest.CHAT.resolve(model);
        List<String> f = new ArrayList<>(List.of("--sft", "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model",
                dir.toString(), "--data-path", data.toString(), "--data-cache-path", tmp.resolve("cache").toString(),
                "--seq-length", String.valueOf(SEQ), "--micro-batch-size", String.valueOf(samplesPerBatch),
                "--global-batch-size", String.valueOf(samplesPerBatch), "--train-iters", "2", "--lr", "1e-3",
                "--min-lr", "1e-3", "--lr-warmup-iters", "0", "--split", "1,0,0", "--make-vocab-size-divisible-by", "1",
                "--log-interval", "1", "--seed", "5", "--metrics-dir", tmp.resolve("metrics-" + System.nanoTime()).toString()));
        f.addAll(List.of(more));
        return f;
    }

    /** The tiny fixture itself. */
    private List<String> fixture(String model, Path data, int samplesPerBatch, String... more) {
        List<String> f = flags(model, data, samplesPerBatch, more);
        f.addAll(List.of("--load-hf", PretrainGptSftTest.CHAT.resolve(model).toString()));
        return f;
    }

    private static Run run(List<String> flags) throws Exception {
        ByteArrayOutputStream text = new ByteArrayOutputStream();
        List<Double> losses = PretrainGpt.run(PretrainArgs.parse(flags.toArray(String[]::new)),
                new PrintStream(text, true, StandardCharsets.UTF_8));
        return new Run(losses, text.toString(StandardCharsets.UTF_8));
    }

    /** The rows the conversations pack into, read through the data API as pretrain-gpt builds them. */
    private long rows(String model, Path data, int multiple) throws Exception {
        try (GptSplits splits = SftDatasetBuilder.create().input(data).tokenizer(PretrainGptSftTest.CHAT.resolve(model), null)
                .cacheDirectory(tmp.resolve("cache")).sequenceLength(SEQ).split(SplitWeights.parse("1,0,0")).packing(true)
                .padToMultipleOf(multiple).build()) {
            return splits.train().orElseThrow().size();
        }
    }

    private static void assertSameLosses(Run expected, Run actual, String layout) {
        assertEquals(2, actual.losses().size(), actual.out());
        for (int i = 0; i < 2; i++) {
            assertEquals(expected.losses().get(i), actual.losses().get(i), 1e-5, layout + " iteration " + (i + 1)
                    + "\n" + actual.out());
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"qwen2", "llama"})
    void packedRowsGiveTheLossOfTheSameConversationsUnpacked(String model) throws Exception {
        Path data = chats();
        int n = WORDS.length;
        Run unpacked = run(fixture(model, data, n));
        long rows = rows(model, data, 1);
        Run packed = run(fixture(model, data, (int) rows, "--packing"));
        assertSameLosses(unpacked, packed, model + " TP1");
        assertTrue(Math.abs(unpacked.losses().get(1) - unpacked.losses().get(0)) > 1e-3, "the step changed the model");

        Matcher one = unpacked.share();
        Matcher many = packed.share();
        assertEquals(List.of(String.valueOf(n), String.valueOf(n), String.valueOf(SEQ)), List.of(one.group(1), one.group(2), one.group(3)));
        assertEquals(List.of(String.valueOf(n), String.valueOf(rows), String.valueOf(SEQ)), List.of(many.group(1), many.group(2), many.group(3)));
        assertTrue(rows < n, rows + " rows of " + n + " conversations");
        assertTrue(Double.parseDouble(many.group(4)) > Double.parseDouble(one.group(4)), one.group() + " / " + many.group());

        if (model.equals("qwen2")) {
            long rowsCp2 = rows(model, data, 4); // each conversation padded to a multiple of 2 x CP
            Run cp2 = run(fixture(model, data, (int) rowsCp2, "--packing", "--nproc", "2", "--context-parallel-size", "2"));
            assertSameLosses(unpacked, cp2, "CP2");
            // every pipeline stage reads the rows' sequences
            assertSameLosses(unpacked, run(fixture(model, data, (int) rows, "--packing", "--nproc", "2",
                    "--pipeline-model-parallel-size", "2")), "PP2");
            Run lora = run(fixture(model, data, n, "--peft", "lora", "--lora-dim", "4", "--lora-alpha", "8"));
            Run loraPacked = run(fixture(model, data, (int) rows, "--packing", "--peft", "lora", "--lora-dim", "4",
                    "--lora-alpha", "8"));
            assertSameLosses(lora, loraPacked, "LoRA");
            assertTrue(Math.abs(lora.losses().get(1) - unpacked.losses().get(1)) > 1e-4, "LoRA trains other weights");
        }
    }

    @Test
    void tensorParallelPackedRowsGiveTheUnpackedLoss() throws Exception {
        // a model of flags (the fixtures' single key/value head cannot be split over two ranks), the Qwen2 tokenizer
        Path data = chats();
        String[] model = {"--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4", "--num-query-groups", "2",
                "--ffn-hidden-size", "64", "--position-embedding-type", "rope", "--normalization", "RMSNorm", "--swiglu",
                "--max-position-embeddings", String.valueOf(SEQ)};
        Run unpacked = run(flags("qwen2", data, WORDS.length, model));
        List<String> tp2 = flags("qwen2", data, (int) rows("qwen2", data, 1), model);
        tp2.addAll(List.of("--packing", "--nproc", "2", "--tensor-model-parallel-size", "2", "--sequence-parallel"));
        assertSameLosses(unpacked, run(tp2), "TP2 SP");
    }

    @Test
    void badCombinationsAreOneLineAndExitCodeTwo() throws Exception {
        Path data = chats();
        assertEquals("pretrain-gpt: --packing needs --sft: it packs the conversations of a --sft --data-path (pretraining"
                + " documents are separated with --reset-attention-mask)", refusal("--mock-data", "--packing"));
        assertEquals("pretrain-gpt: --packing gives every micro-batch its own conversations' attention; a CUDA graph"
                + " replays one fixed attention: drop --cuda-graph-impl local", refusal(fixture("qwen2", data, 1,
                "--packing", "--cuda-graph-impl", "local", "--cuda-graph-scope", "full_iteration")));
        assertEquals("pretrain-gpt: --packing restarts the positions and the attention at every conversation already:"
                + " drop --reset-attention-mask", refusal(fixture("qwen2", data, 1, "--packing", "--reset-attention-mask")));
        assertEquals("pretrain-gpt: --cp-comm-type a2a gathers whole columns in position order; --packing pads every"
                + " conversation to a multiple of 2 x --context-parallel-size and splits it per sequence: use --cp-comm-type"
                + " p2p or allgather", refusal(fixture("qwen2", data, 1, "--packing", "--nproc", "2",
                "--context-parallel-size", "2", "--cp-comm-type", "a2a")));
        assertTrue(refusal(fixture("qwen2", data, 1, "--packing", "--nproc", "2", "--context-parallel-size", "2",
                "--cp-comm-type", "a2a+p2p", "--hierarchical-context-parallel-sizes", "2", "1"))
                .startsWith("pretrain-gpt: --cp-comm-type a2a+p2p gathers whole columns in position order; --packing"));
        assertEquals("pretrain-gpt: --attention-backend flash under context parallelism runs a fused ring, which has no"
                + " packed path; packed sequences need --attention-backend unfused (or auto)", refusal(fixture("qwen2", data, 1,
                "--packing", "--nproc", "2", "--context-parallel-size", "2", "--attention-backend", "flash")));
    }
}
