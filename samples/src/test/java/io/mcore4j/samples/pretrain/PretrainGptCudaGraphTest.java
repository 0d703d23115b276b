package io.mcore4j.samples.pretrain;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Steps replayed from a graph ({@code --cuda-graph-impl local --cuda-graph-scope full_iteration}) against
 * eager steps, on the CPU through {@link ReplayingGraphCapture}, which replays a capture by running its body
 * again: the step's warm-up, the copies into the graph's inputs, the gradients the graph makes (left alone
 * between replays), the losses read from the graph's output and the capture again after the loss scale
 * changes must give the eager losses exactly. On GPUs, scripts/gpu/cuda-graph-check.sh compares the same with
 * real CUDA graphs.
 */
class PretrainGptCudaGraphTest {
    private static final List<String> GRAPH = List.of("--cuda-graph-impl", "local", "--cuda-graph-scope", "full_iteration",
            "--cuda-graph-warmup-steps", "2");

    @TempDir
    Path dir;

    @AfterEach
    void off() {
        ReplayingGraphCapture.enabled = false;
        ReplayingGraphCapture.refuse = false;
    }

    private List<String> flags(int nproc, int steps, String... more) {
        List<String> f = new ArrayList<>(List.of("--nproc", String.valueOf(nproc), "--num-layers", "2", "--hidden-size", "32",
                "--num-attention-heads", "4", "--seq-length", "16", "--micro-batch-size", "2", "--global-batch-size",
                String.valueOf(4 * Math.max(1, nproc / 2)), "--lr", "1e-3", "--min-lr", "1e-4", "--lr-warmup-iters", "2",
                "--train-iters", String.valueOf(steps), "--mock-data", "--vocab-size", "128", "--log-interval", "1",
                "--seed", "11", "--metrics-dir", dir.resolve("metrics-" + System.nanoTime()).toString()));
        f.addAll(List.of(more));
        return f;
    }

    private static List<Double> train(List<String> flags) throws Exception {
        PrintStream quiet = new PrintStream(new ByteArrayOutputStream(), true, StandardCharsets.UTF_8);
        return PretrainGpt.run(PretrainArgs.parse(flags.toArray(String[]::new)), quiet);
    }

    private static List<Double> graphed(List<String> flags) throws Exception {
        List<String> g = new ArrayList<>(flags);
        g.addAll(GRAPH);
        ReplayingGraphCapture.enabled = true;
        try {
            return train(g);
        } finally {
            ReplayingGraphCapture.enabled = false;
        }
    }

    @Test
    void replayedStepsGiveTheEagerLossesAtTp2Dp2() throws Exception {
        List<String> layout = flags(4, 6, "--tensor-model-parallel-size", "2", "--sequence-parallel",
                "--use-distributed-optimizer");
        List<Double> eager = train(layout);
        int captures = ReplayingGraphCapture.CAPTURES.get();
        int replays = ReplayingGraphCapture.REPLAYS.get();
        List<Double> replayed = graphed(layout);
        assertEquals(eager, replayed, "losses of eager steps and of steps replayed from the graph");
        assertEquals(4, ReplayingGraphCapture.CAPTURES.get() - captures, "one capture per rank, after 2 eager steps");
        assertEquals(4 * 4, ReplayingGraphCapture.REPLAYS.get() - replays, "steps 3 to 6 replayed on each of 4 ranks");
    }

    @Test
    void replayedStepsGiveTheEagerLossesAtTp2Pp2() throws Exception {
        List<String> layout = flags(4, 5, "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2",
                "--global-batch-size", "8");
        List<Double> eager = train(layout);
        int captures = ReplayingGraphCapture.CAPTURES.get();
        assertEquals(eager, graphed(layout), "losses of eager steps and of steps replayed from the graph, 4 micro-batches");
        assertEquals(4, ReplayingGraphCapture.CAPTURES.get() - captures, "one capture per rank");
    }

    @Test
    void replayedStepsGiveTheEagerLossesOfTheInterleavedSchedule() throws Exception {
        // PP2 with two model chunks of one layer per rank: the graph holds the interleaved 1F1B order
        List<String> layout = flags(2, 5, "--pipeline-model-parallel-size", "2", "--num-layers", "4",
                "--num-layers-per-virtual-pipeline-stage", "1", "--global-batch-size", "8");
        List<Double> eager = train(layout);
        int captures = ReplayingGraphCapture.CAPTURES.get();
        assertEquals(eager, graphed(layout), "losses of eager steps and of replayed interleaved steps, 4 micro-batches");
        assertEquals(2, ReplayingGraphCapture.CAPTURES.get() - captures, "one capture per rank");
    }

    @Test
    void aChangedLossScaleCapturesAgain() throws Exception {
        // with a window of one clean step the loss scale doubles every step (or halves on an overflow): each change captures again
        List<String> fp16 = flags(1, 6, "--fp16", "--loss-scale-window", "1");
        List<Double> eager = train(fp16);
        int captures = ReplayingGraphCapture.CAPTURES.get();
        List<Double> replayed = graphed(fp16);
        assertEquals(eager, replayed, "losses under fp16's dynamic loss scale");
        int made = ReplayingGraphCapture.CAPTURES.get() - captures;
        // at most one per graphed step, and more than one: the scale changed (an overflow within the hysteresis keeps it)
        assertTrue(made > 1 && made <= 4, made + " captures for the 4 graphed steps");
    }

    @Test
    void withoutGraphSupportEveryStepIsEager() throws Exception {
        List<String> serial = flags(1, 4);
        List<Double> eager = train(serial);
        List<String> g = new ArrayList<>(serial);
        g.addAll(GRAPH);
        int captures = ReplayingGraphCapture.CAPTURES.get();
        assertEquals(eager, train(g));
        assertEquals(captures, ReplayingGraphCapture.CAPTURES.get(), "no graph support here: nothing captured");
    }

    @Test
    void aCaptureTheDeviceRefusesStopsTheRunNamingTheCause() {
        ReplayingGraphCapture.refuse = true;
        Exception e = assertThrows(Exception.class, () -> graphed(flags(1, 4)));
        String message = String.valueOf(e.getMessage()) + (e.getCause() != null ? " / " + e.getCause().getMessage() : "");
        assertTrue(message.contains("capturing the step's forward and backward into a CUDA graph failed")
                && message.contains("operation not permitted when stream is capturing")
                && message.contains("run without --cuda-graph-impl local"), message);
    }

    @Test
    void flagsAGraphCannotHoldAreRefused() {
        assertRefused("mcore4j captures full_iteration only", "--cuda-graph-impl", "local");
        assertRefused("mcore4j captures full_iteration only", "--cuda-graph-impl", "local", "--cuda-graph-scope", "attn");
        assertRefused("is not one of none, local", "--cuda-graph-impl", "transformer_engine");
        assertRefused("has no effect without --cuda-graph-impl local", "--cuda-graph-scope", "full_iteration");
        assertRefused("must be at least 1", "--cuda-graph-warmup-steps", "0");
        List<String> dropout = new ArrayList<>(GRAPH);
        dropout.addAll(List.of("--hidden-dropout", "0.1"));
        assertRefused("needs --hidden-dropout 0 and --attention-dropout 0", dropout.toArray(String[]::new));
    }

    @Test
    void theGraphHoldsTheOverlappedGradientReductionWithTheEagerLosses() throws Exception {
        // the captured body arms the step, reduces the buckets as backward leaves them and pins the buffers it
        // synchronised into; each later step takes them from there (DDP's all-reduce and the distributed optimizer's
        // reduce-scatter, with TP2 and sequence parallelism's pre-sums across TP)
        for (List<String> layout : List.of(flags(2, 5, "--overlap-grad-reduce"),
                flags(4, 5, "--overlap-grad-reduce", "--use-distributed-optimizer", "--tensor-model-parallel-size", "2",
                        "--sequence-parallel"))) {
            List<Double> eager = train(layout);
            int captures = ReplayingGraphCapture.CAPTURES.get();
            assertEquals(eager, graphed(layout), "losses of eager steps and of graphed ones, " + layout);
            assertTrue(ReplayingGraphCapture.CAPTURES.get() > captures, "captured, " + layout);
        }
    }

    @Test
    void moeLayersPaddedToCapacityReplayWithTheEagerLosses() throws Exception {
        // Megatron's rule for MoE under a graph: capacity and padding fix every expert's rows, so nothing is read on the
        // host; the routers' auxiliary losses (and the z-loss) add into the tracker's accumulators in place
        // also the shared expert beside the dispatch's started all-to-all, and the all-gather dispatcher
        List<String> moe = List.of("--num-experts", "4", "--moe-router-topk", "2", "--expert-model-parallel-size", "2",
                "--moe-grouped-gemm", "--moe-permute-fusion", "--moe-expert-capacity-factor", "1.0",
                "--moe-pad-expert-input-to-capacity", "--moe-aux-loss-coeff", "0.01", "--moe-z-loss-coeff", "0.001");
        for (List<String> dispatch : List.of(List.of("--moe-token-dispatcher-type", "alltoall"),
                List.of("--moe-token-dispatcher-type", "alltoall", "--moe-shared-expert-intermediate-size", "32",
                        "--moe-shared-expert-overlap"),
                List.of("--moe-token-dispatcher-type", "allgather"))) {
            List<String> layout = flags(2, 5, moe.toArray(String[]::new));
            layout.addAll(dispatch);
            List<Double> eager = train(layout);
            int captures = ReplayingGraphCapture.CAPTURES.get();
            assertEquals(eager, graphed(layout), "losses of eager steps and of graphed ones with MoE layers, " + dispatch);
            assertEquals(2, ReplayingGraphCapture.CAPTURES.get() - captures, "one capture per rank, " + dispatch);
        }
    }

    @Test
    void moeLayersAGraphCannotHoldAreRefused() {
        List<String> moe = new ArrayList<>(GRAPH);
        moe.addAll(List.of("--num-experts", "4", "--moe-permute-fusion"));
        assertRefused("needs --moe-expert-capacity-factor and --moe-pad-expert-input-to-capacity",
                moe.toArray(String[]::new));
        moe.addAll(List.of("--moe-expert-capacity-factor", "1.0"));
        assertRefused("needs --moe-expert-capacity-factor and --moe-pad-expert-input-to-capacity",
                moe.toArray(String[]::new));
        moe.add("--moe-pad-expert-input-to-capacity");
        List<String> composed = new ArrayList<>(moe);
        composed.remove("--moe-permute-fusion");
        assertRefused("needs --moe-permute-fusion", composed.toArray(String[]::new));
        List<String> jitter = new ArrayList<>(moe);
        jitter.addAll(List.of("--moe-input-jitter-eps", "0.01"));
        assertRefused("does not take --moe-input-jitter-eps 0.01", jitter.toArray(String[]::new));
        moe.add("--moe-router-force-load-balancing");
        assertRefused("does not take --moe-router-force-load-balancing", moe.toArray(String[]::new));
    }

    @Test
    void fp8WithoutTheFusedCastIsRefusedByTheStep() {
        ReplayingGraphCapture.enabled = true;
        // FP8 under a graph needs its weight casts in place, which only the device's fused cast does
        IllegalArgumentException fp8 = assertThrows(IllegalArgumentException.class,
                () -> graphed(flags(1, 3, "--bf16", "--fp8-format", "hybrid")));
        assertTrue(fp8.getMessage().contains("which has no fused cast"), fp8.getMessage());
    }

    private void assertRefused(String expected, String... more) {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> PretrainArgs.parse(flags(1, 2, more).toArray(String[]::new)).setup());
        assertTrue(e.getMessage().contains(expected), e.getMessage());
    }
}
