package io.mcore4j.samples.launch;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.samples.pretrain.PretrainArgs;
import io.mcore4j.samples.pretrain.PretrainGpt;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** pretrain-gpt with one process per rank over TCP gives the same losses as ranks in one JVM. */
class LocalLauncherTest {
    private static final Pattern LOSS = Pattern.compile("iteration +(\\d+)/ *\\d+ \\| loss ([0-9.]+)");

    @TempDir
    Path dir;

    @Test
    void processesOverTcpMatchThreadsInOneJvm() throws Exception {
        List<String> flags = List.of("--tensor-model-parallel-size", "2", "--num-layers", "2", "--hidden-size", "32",
                "--num-attention-heads", "4", "--seq-length", "16", "--micro-batch-size", "2", "--global-batch-size", "4",
                "--train-iters", "4", "--log-interval", "1", "--mock-data", "--vocab-size", "250",
                "--make-vocab-size-divisible-by", "64", "--distributed-timeout-minutes", "1");
        List<String> inJvm = new ArrayList<>(flags);
        inJvm.addAll(List.of("--nproc", "2", "--metrics-dir", dir.resolve("threads").toString()));
        ByteArrayOutputStream threadsOut = new ByteArrayOutputStream();
        PretrainGpt.run(PretrainArgs.parse(inJvm.toArray(String[]::new)), new PrintStream(threadsOut, true, StandardCharsets.UTF_8));

        List<String> program = new ArrayList<>(List.of(PretrainGpt.class.getName()));
        program.addAll(flags);
        program.addAll(List.of("--metrics-dir", dir.resolve("processes").toString()));
        ByteArrayOutputStream processesOut = new ByteArrayOutputStream();
        int status = LocalLauncher.launch(2, List.of("-Xmx1g", "-Dai.djl.pytorch.num_threads=1"), program,
                new PrintStream(processesOut, true, StandardCharsets.UTF_8));
        String processes = processesOut.toString(StandardCharsets.UTF_8);
        assertEquals(0, status, processes);
        List<String> expected = losses(threadsOut.toString(StandardCharsets.UTF_8));
        assertEquals(4, expected.size(), threadsOut.toString(StandardCharsets.UTF_8));
        assertEquals(expected, losses(processes), processes);
        assertTrue(processes.contains("[rank 1]") || processes.contains("[rank 0]"));
    }

    private static List<String> losses(String output) {
        List<String> out = new ArrayList<>();
        Matcher m = LOSS.matcher(output);
        while (m.find()) {
            out.add(m.group(1) + ":" + m.group(2));
        }
        return out;
    }
}
