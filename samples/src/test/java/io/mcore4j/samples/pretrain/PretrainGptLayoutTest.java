package io.mcore4j.samples.pretrain;

import static io.mcore4j.samples.pretrain.PretrainRuns.assertSameLosses;
import static io.mcore4j.samples.pretrain.PretrainRuns.train;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The training loop end to end, as a user runs it: the same global batch and seed give the same
 * losses under every layout, and a resumed run continues the uninterrupted run's losses.
 */
class PretrainGptLayoutTest {
    @TempDir
    Path dir;

    private List<String> common(int nproc, int steps) {
        return new ArrayList<>(List.of("--nproc", String.valueOf(nproc), "--num-layers", "4", "--hidden-size", "32",
                "--num-attention-heads", "4", "--seq-length", "16", "--micro-batch-size", "2", "--global-batch-size", "8",
                "--lr", "1e-3", "--min-lr", "1e-4", "--lr-warmup-iters", "2", "--train-iters", String.valueOf(steps),
                "--mock-data", "--vocab-size", "250", "--make-vocab-size-divisible-by", "64", "--log-interval", "5", "--seed", "7", "--clip-grad", "1.0",
                "--metrics-dir", dir.resolve("metrics-" + System.nanoTime()).toString()));
    }

    @Test
    void everyLayoutGivesTheSerialLosses() throws Exception {
        List<Double> serial = train(common(1, 20));
        assertEquals(20, serial.size());
        assertTrue(serial.get(19) < serial.get(0), "the loss should fall: " + serial);
        List<String> tp2pp2dp2 = common(8, 20);
        tp2pp2dp2.addAll(List.of("--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2"));
        assertSameLosses(serial, train(tp2pp2dp2), "TP2 PP2 DP2");
        List<String> sp = new ArrayList<>(tp2pp2dp2);
        sp.add("--sequence-parallel");
        sp.add("--use-distributed-optimizer");
        assertSameLosses(serial, train(sp), "TP2 PP2 DP2 + SP + distributed optimizer");
        List<String> overlapped = new ArrayList<>(tp2pp2dp2);
        overlapped.addAll(List.of("--overlap-grad-reduce", "--ddp-bucket-size", "2000"));
        assertSameLosses(serial, train(overlapped), "TP2 PP2 DP2 + overlapped gradient reduction");
        List<String> dp4 = common(4, 20);
        dp4.addAll(List.of("--use-distributed-optimizer", "--overlap-grad-reduce", "--ddp-bucket-size", "2000",
                "--untie-embeddings-and-output-weights"));
        List<String> serialUntied = common(1, 20);
        serialUntied.add("--untie-embeddings-and-output-weights");
        assertSameLosses(train(serialUntied), train(dp4), "DP4 + distributed optimizer + overlapped gradient reduction");
        List<String> vp = common(4, 20);
        vp.addAll(List.of("--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage", "1"));
        assertSameLosses(serial, train(vp), "PP2 VP2 DP2");
    }

    /**
     * Megatron's --tp-comm-overlap: the sequence-parallel linears with their all-gathers and
     * reduce-scatters pipelined piece by piece give the losses of the composed collectives, at TP2
     * (two pieces per rank) and at TP2 x DP2 with SwiGLU and no biases.
     */
    @Test
    void tensorParallelCommunicationOverlapGivesTheSameLosses() throws Exception {
        for (List<String> layout : List.of(List.of("--tensor-model-parallel-size", "2"),
                List.of("--tensor-model-parallel-size", "2", "--swiglu", "--disable-bias-linear"))) {
            List<String> composed = common(layout.size() == 2 ? 2 : 4, 10);
            composed.addAll(layout);
            composed.add("--sequence-parallel");
            List<Double> reference = train(composed);
            assertEquals(10, reference.size());
            List<String> overlapped = new ArrayList<>(composed);
            overlapped.add("--tp-comm-overlap");
            assertSameLosses(reference, train(overlapped), layout + " + SP + --tp-comm-overlap");
        }
    }

    @Test
    void mixtureOfExpertsWithExpertParallelismGivesTheSerialLosses() throws Exception {
        List<String> moe = List.of("--num-experts", "4", "--moe-router-topk", "2", "--moe-aux-loss-coeff", "0.01");
        List<String> serialFlags = common(1, 20);
        serialFlags.addAll(moe);
        List<Double> serial = train(serialFlags);
        assertTrue(serial.get(19) < serial.get(0), "the loss should fall: " + serial);
        for (String dispatcher : List.of("allgather", "alltoall")) {
            List<String> ep2 = common(8, 20);
            ep2.addAll(moe);
            ep2.addAll(List.of("--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2",
                    "--expert-model-parallel-size", "2", "--moe-token-dispatcher-type", dispatcher));
            assertSameLosses(serial, train(ep2), "TP2 PP2 DP2 EP2 (" + dispatcher + ")");
        }
    }

    @Test
    void aResumedRunContinuesTheSameLosses() throws Exception {
        List<String> full = common(4, 12);
        full.addAll(List.of("--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2"));
        List<Double> uninterrupted = train(full);

        Path save = dir.resolve("ckpt");
        List<String> first = common(4, 6);
        first.addAll(List.of("--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2",
                "--lr-decay-iters", "12", "--save", save.toString()));
        List<Double> head = train(first);
        assertTrue(Files.exists(save.resolve("latest")) || Files.list(save).findAny().isPresent(), "no checkpoint written");
        List<String> second = common(4, 12);
        second.addAll(List.of("--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2",
                "--lr-decay-iters", "12", "--load", save.toString()));
        List<Double> tail = train(second);
        List<Double> resumed = new ArrayList<>(head);
        resumed.addAll(tail);
        assertSameLosses(uninterrupted, resumed, "save at 6, resume to 12");
    }

    /**
     * A checkpoint written at TP2 x PP2 (model and optimizer state) and loaded at TP4 x PP1 and at
     * TP1 x PP4 continues with the losses of an uninterrupted run at the new layout.
     */
    @Test
    void aCheckpointReshardsToOtherLayoutsAndContinuesTheSameLosses() throws Exception {
        Path save = dir.resolve("reshard");
        List<String> first = common(4, 6);
        first.addAll(List.of("--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2",
                "--lr-decay-iters", "12", "--save", save.toString()));
        train(first);
        for (List<String> layout : List.of(List.of("--tensor-model-parallel-size", "4"),
                List.of("--pipeline-model-parallel-size", "4"))) {
            List<String> uninterrupted = common(4, 12);
            uninterrupted.addAll(layout);
            uninterrupted.addAll(List.of("--lr-decay-iters", "12"));
            List<Double> reference = train(uninterrupted).subList(6, 12);
            List<String> resumed = common(4, 12);
            resumed.addAll(layout);
            resumed.addAll(List.of("--lr-decay-iters", "12", "--load", save.toString()));
            assertSameLosses(reference, train(resumed), "saved at TP2 PP2, resumed with " + layout);
        }
    }

    /**
     * Eight ranks: a checkpoint written at TP2 x PP2 x DP2 reloads at TP8 and at TP1 x DP8 and
     * continues with the losses of an uninterrupted run at those layouts (8 heads; the vocabulary
     * 500 pads to 512 at every tensor-parallel size).
     */
    @Test
    void anEightRankCheckpointReloadsAtTp8AndDp8() throws Exception {
        List<String> model = List.of("--num-attention-heads", "8", "--vocab-size", "500", "--global-batch-size", "16");
        Path save = dir.resolve("eight");
        List<String> first = common(8, 4);
        first.addAll(model);
        first.addAll(List.of("--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2",
                "--lr-decay-iters", "8", "--save", save.toString()));
        train(first);
        for (List<String> layout : List.of(List.of("--tensor-model-parallel-size", "8"), List.<String>of())) {
            List<String> uninterrupted = common(8, 8);
            uninterrupted.addAll(model);
            uninterrupted.addAll(layout);
            uninterrupted.addAll(List.of("--lr-decay-iters", "8"));
            List<Double> reference = train(uninterrupted).subList(4, 8);
            List<String> resumed = common(8, 8);
            resumed.addAll(model);
            resumed.addAll(layout);
            resumed.addAll(List.of("--lr-decay-iters", "8", "--load", save.toString()));
            assertSameLosses(reference, train(resumed), "saved at TP2 PP2 DP2, resumed with " + (layout.isEmpty() ? "TP1 DP8" : layout));
        }
    }

    /**
     * Fused SwiGLU weights are split in strides (each tensor-parallel rank holds rows of the gate
     * and of the up projection); their optimizer state is saved in global coordinates, so a
     * checkpoint written at TP2 x DP2, with and without the distributed optimizer, resumes at TP4
     * and at TP1 x DP4 with the losses of an uninterrupted run at the new layout.
     */
    @Test
    void stridedOptimizerStateReshardsToOtherTensorParallelSizes() throws Exception {
        // a larger learning rate moves the weights far enough from their start that a row of
        // optimizer state at the wrong global place changes the losses well beyond the tolerance
        List<String> swiglu = List.of("--swiglu", "--lr", "1e-2", "--min-lr", "1e-3", "--lr-decay-iters", "12");
        List<String> sizes = List.of("4", "1");
        List<List<Double>> references = new ArrayList<>();
        for (String tp : sizes) {
            List<String> uninterrupted = common(4, 12);
            uninterrupted.addAll(List.of("--tensor-model-parallel-size", tp));
            uninterrupted.addAll(swiglu);
            references.add(train(uninterrupted).subList(6, 12));
        }
        for (boolean distributed : List.of(false, true)) {
            Path save = dir.resolve("swiglu-" + distributed);
            List<String> first = common(4, 6);
            first.addAll(List.of("--tensor-model-parallel-size", "2", "--save", save.toString()));
            first.addAll(swiglu);
            if (distributed) {
                first.add("--use-distributed-optimizer");
            }
            train(first);
            for (int i = 0; i < sizes.size(); i++) {
                String tp = sizes.get(i);
                List<String> resumed = common(4, 12);
                resumed.addAll(List.of("--tensor-model-parallel-size", tp, "--load", save.toString()));
                resumed.addAll(swiglu);
                if (distributed) {
                    resumed.add("--use-distributed-optimizer");
                }
                assertSameLosses(references.get(i), train(resumed), "SwiGLU saved at TP2 DP2" + (distributed
                        ? " with the distributed optimizer" : "") + ", resumed at TP" + tp + " DP" + (4 / Integer.parseInt(tp)));
            }
        }
    }

    @Test
    void inconsistentFlagsAreNamed() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> PretrainArgs.parse("--mock-data", "--global-batch-size", "10", "--micro-batch-size", "4")
                        .setup().dims(1));
        assertEquals("--global-batch-size 10 is not divisible by --micro-batch-size 4 x data-parallel size 1", e.getMessage());
        String unknown = assertThrows(IllegalArgumentException.class, () -> PretrainArgs.parse("--tensor-parallel", "2")).getMessage();
        assertTrue(unknown.contains("Unknown option") && unknown.contains("'--tensor-parallel'"), unknown);
        assertThrows(IllegalArgumentException.class, () -> PretrainArgs.parse("--num-layers"));
    }
}
