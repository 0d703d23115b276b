package io.mcore4j.samples.pretrain;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The plan command: help, a ranked plan, one layout's estimate, errors with exit code 2, and --auto-layout. */
class PlanLayoutsTest {
    @TempDir
    Path dir;

    private record Result(int code, String out, String err) {}

    private static Result plan(String... argv) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        int code = PlanLayouts.execute(argv, new PrintStream(out, true, StandardCharsets.UTF_8),
                new PrintStream(err, true, StandardCharsets.UTF_8));
        return new Result(code, out.toString(StandardCharsets.UTF_8), err.toString(StandardCharsets.UTF_8));
    }

    @Test
    void helpListsThePlannerAndThePretrainFlags() {
        Result r = plan("--help");
        assertEquals(0, r.code(), r.err());
        for (String flag : List.of("--gpus-per-node", "--cluster", "--calibration", "--evaluate", "--top", "--num-layers",
                "--global-batch-size", "--micro-batch-size")) {
            assertTrue(r.out().contains(flag), flag + " in\n" + r.out());
        }
    }

    @Test
    void theFourGpuPlanOfThe1_3bModelPutsDataParallelismFirst() {
        Result r = plan("--model", "1.3b", "--global-batch-size", "32", "--gpus-per-node", "4", "--top", "3");
        assertEquals(0, r.code(), r.err());
        assertTrue(r.out().contains("1. TP1 PP1 DP4"), r.out());
        assertTrue(r.out().contains("3. "), r.out());
        assertTrue(r.out().contains("memory: ") && r.out().contains("time: ") && r.out().contains("flags:  --tensor-model-parallel-size 1"),
                r.out());
    }

    @Test
    void evaluateEstimatesTheLayoutTheFlagsGive() {
        Result r = plan("--model", "1.3b", "--gpus-per-node", "1", "--global-batch-size", "8", "--evaluate");
        assertEquals(0, r.code(), r.err());
        assertTrue(r.out().contains("1. TP1 PP1 DP1 mb4 none:"), r.out());
        assertFalse(r.out().contains("2. "), r.out());
        Matcher m = Pattern.compile("peak ([0-9.]+) GiB").matcher(r.out());
        assertTrue(m.find(), r.out());
        assertEquals(36.0, Double.parseDouble(m.group(1)), 0.05, "the calibrated 1.3B figure");
    }

    @Test
    void badValuesAndImpossibleJobsExitWithTwoAndOneLine() throws Exception {
        Result bad = plan("--model", "1.3b", "--gpu", "a100");
        assertEquals(2, bad.code());
        assertTrue(bad.err().startsWith("plan: --gpu a100 is not one of h200, h100"), bad.err());
        Result none = plan("--model", "llama7b", "--gpus-per-node", "1", "--global-batch-size", "4", "--gpu-memory-gib", "40");
        assertEquals(2, none.code());
        assertTrue(none.err().contains("none fits in 40.0 GiB"), none.err());
        Result refused = plan("--model", "1.3b", "--gpus-per-node", "4", "--global-batch-size", "8",
                "--tensor-model-parallel-size", "3", "--evaluate");
        assertEquals(2, refused.code());
        assertTrue(refused.err().contains("does not divide 4 GPUs"), refused.err());
        Path cluster = dir.resolve("cluster.json");
        Files.writeString(cluster, "{\"gpusPerNode\": 2, \"nodes\": 1, \"gpuMemoryGiB\": 80}");
        Result file = plan("--model", "tiny", "--cluster", cluster.toString());
        assertEquals(2, file.code());
        assertTrue(file.err().contains("peakTflops must be a positive number, got 0.0"), file.err());
    }

    @Test
    void autoLayoutTrainsWithThePlannedLayout() throws Exception {
        // two ranks of 80 GiB: every layout fits, the fastest by the H100 calibration is data-parallel
        String text = trainTwoStepsWithAutoLayout("--tensor-model-parallel-size", "2");
        assertTrue(text.contains("auto-layout: TP1 PP1 DP2"), text);
    }

    @Test
    void autoLayoutWithMegatronFsdpPlansTheStrategyGiven() throws Exception {
        // ZeRO-3 without the recompute it needs, and at PP2: the planner chooses both
        String text = trainTwoStepsWithAutoLayout("--use-megatron-fsdp", "--data-parallel-sharding-strategy",
                "optim_grads_params", "--pipeline-model-parallel-size", "2");
        assertTrue(text.contains("auto-layout: TP1 PP1 DP2 mb") && text.contains(" full uniform 1 fsdp optim_grads_params ("),
                text);
    }

    /** Two iterations of a tiny model on two in-JVM ranks planned for two 80 GiB H100-like GPUs; returns the output. */
    private String trainTwoStepsWithAutoLayout(String... more) throws Exception {
        Path cluster = dir.resolve("cpu.json");
        Files.writeString(cluster, "{\"gpusPerNode\": 2, \"nodes\": 1, \"gpuMemoryGiB\": 80, \"peakTflops\": 989,"
                + " \"memoryBandwidthGBps\": 3350, \"intraNodeBandwidthGBps\": 300, \"interNodeBandwidthGBps\": 45}");
        List<String> argv = new ArrayList<>(List.of("--nproc", "2", "--auto-layout", "--auto-layout-cluster",
                cluster.toString(), "--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4",
                "--seq-length", "16", "--global-batch-size", "4", "--train-iters", "2", "--mock-data", "--vocab-size", "250",
                "--log-interval", "1", "--metrics-dir", dir.resolve("m").toString()));
        argv.addAll(List.of(more));
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        List<Double> losses = PretrainGpt.run(PretrainArgs.parse(argv.toArray(String[]::new)),
                new PrintStream(out, true, StandardCharsets.UTF_8));
        String text = out.toString(StandardCharsets.UTF_8);
        assertEquals(2, losses.size(), text);
        return text;
    }
}
