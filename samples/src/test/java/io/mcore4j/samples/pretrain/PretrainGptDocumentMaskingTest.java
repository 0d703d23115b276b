package io.mcore4j.samples.pretrain;

import static io.mcore4j.samples.pretrain.PretrainRuns.assertSameLosses;
import static io.mcore4j.samples.pretrain.PretrainRuns.refusal;
import static io.mcore4j.samples.pretrain.PretrainRuns.train;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * pretrain-gpt with Megatron's {@code --reset-position-ids}, {@code --reset-attention-mask} and
 * {@code --eod-mask-loss}, as a user runs it on mock data whose tokens hold the NullTokenizer's
 * end-of-document id about once in eight (ids 0..7, padded to 8 at TP1 and TP2): the flags change the losses, and TP2, PP2 with virtual stages
 * (whose middle chunks read the packed documents too), CP2 and the fused attention give the serial
 * run's losses; layouts without a packed path are refused with one line.
 */
class PretrainGptDocumentMaskingTest {
    private static final String[] FLAGS = {"--reset-position-ids", "--reset-attention-mask", "--eod-mask-loss"};

    @TempDir
    Path dir;

    private List<String> common(int nproc, String... more) {
        List<String> flags = new ArrayList<>(List.of("--nproc", String.valueOf(nproc), "--num-layers", "4",
                "--hidden-size", "32", "--num-attention-heads", "4", "--num-query-groups", "2",
                "--position-embedding-type", "rope", "--seq-length", "16", "--micro-batch-size", "2",
                "--global-batch-size", "4", "--lr", "1e-3", "--min-lr", "1e-4", "--lr-warmup-iters", "2",
                "--train-iters", "4", "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "7",
                "--make-vocab-size-divisible-by", "4", "--log-interval", "2", "--seed", "7", "--attention-backend", "unfused",
                "--metrics-dir", dir.resolve("metrics-" + System.nanoTime()).toString()));
        flags.addAll(List.of(more));
        return flags;
    }

    @Test
    void layoutsGiveTheSerialLossesOfMaskedDocuments() throws Exception {
        List<Double> plain = train(common(1));
        List<Double> serial = train(common(1, FLAGS));
        assertEquals(4, serial.size());
        assertTrue(Math.abs(serial.get(0) - plain.get(0)) > 1e-3, "the flags change the first loss: " + serial + " vs " + plain);
        List<String> tp2 = common(2, FLAGS);
        tp2.addAll(List.of("--tensor-model-parallel-size", "2", "--sequence-parallel"));
        assertSameLosses(serial, train(tp2), "TP2 SP");
        List<String> vp = common(2, FLAGS);
        vp.addAll(List.of("--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage", "1"));
        assertSameLosses(serial, train(vp), "PP2 VP2");
        List<String> cp2 = common(2, FLAGS);
        cp2.addAll(List.of("--context-parallel-size", "2"));
        assertSameLosses(serial, train(cp2), "CP2 p2p");
        List<String> fused = common(1, FLAGS);
        fused.addAll(List.of("--attention-backend", "fused"));
        assertSameLosses(serial, train(fused), "fused attention");
    }

    @Test
    void layoutsWithoutAPackedPathAreRefused() {
        assertEquals("pretrain-gpt: --attention-backend flash under context parallelism runs a fused ring, which has no"
                + " packed path; packed sequences need --attention-backend unfused (or auto)",
                refusal("--mock-data", "--reset-attention-mask", "--tokenizer-type", "NullTokenizer", "--vocab-size", "7", "--nproc", "2",
                        "--context-parallel-size", "2", "--attention-backend", "flash", "--seq-length", "16"));
        assertEquals("pretrain-gpt: --reset-attention-mask gives every micro-batch its own documents' attention; a CUDA"
                + " graph replays one fixed attention: drop --cuda-graph-impl local",
                refusal("--mock-data", "--reset-attention-mask", "--tokenizer-type", "NullTokenizer", "--vocab-size", "7",
                        "--cuda-graph-impl", "local", "--cuda-graph-scope", "full_iteration"));
        assertEquals("pretrain-gpt: --eod-mask-loss needs the tokenizer's end-of-document id (give --tokenizer-type, or"
                + " --eod-token for a HuggingFace tokenizer without one)", refusal("--mock-data", "--eod-mask-loss"));
    }
}
