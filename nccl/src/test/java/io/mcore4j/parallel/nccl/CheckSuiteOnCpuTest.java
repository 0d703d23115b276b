package io.mcore4j.parallel.nccl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.parallel.ProcessGroup;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.stream.IntStream;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.junit.jupiter.api.Test;

/**
 * The GPU check's suite run over the in-JVM backend on CPU: its serial references must agree with a
 * backend already tested against them, so a FAIL on the GPU points at the NCCL backend, not the check.
 */
class CheckSuiteOnCpuTest {

    @ParameterizedTest
    @ValueSource(ints = {1, 2, 3, 4})
    void theSuitePassesOnTheInJvmBackend(int world) {
        List<String> outputs = InJvmWorld.run(world, Duration.ofSeconds(60), ctx -> {
            ByteArrayOutputStream bytes = new ByteArrayOutputStream();
            CheckReport report = new CheckReport(ctx.rank(), new PrintStream(bytes, true, StandardCharsets.UTF_8));
            new NcclCollectivesCheck(ctx.manager(), report).suite(
                    ctx.backend().communicator(ProcessGroup.of("world", IntStream.range(0, world).toArray(), ctx.rank())));
            String out = bytes.toString(StandardCharsets.UTF_8);
            assertEquals(0, report.failed(), out);
            return out;
        });
        String rank0 = outputs.get(0);
        assertTrue(rank0.contains("PASS all-reduce AVG float16 world[") && rank0.contains("PASS all-to-all uneven int64")
                && rank0.contains("PASS all-to-all of chunks float16") && rank0.contains("PASS send/recv ring")
                && rank0.contains("PASS all-gather-bytes"), rank0);
    }

    @Test
    void theComparisonCanFail() {
        try (NDManager m = NDManager.newBaseManager()) {
            var x = m.create(new float[] {1, 2, 3.001f}, new Shape(3));
            assertTrue(CheckReport.compare(new double[] {1, 2, 3}, new Shape(3), x, DataType.FLOAT32, 3) != null);
            assertEquals(null, CheckReport.compare(new double[] {1, 2, 3.001}, new Shape(3), x, DataType.FLOAT32, 3));
            assertTrue(CheckReport.compare(new double[] {1, 2, 3}, new Shape(1, 3), x, DataType.FLOAT32, 3).contains("shape"));
            var i = m.create(new int[] {1, 2, 4});
            assertTrue(CheckReport.compare(new double[] {1, 2, 3}, new Shape(3), i, DataType.INT32, 0).contains("element 2"));
        }
    }
}
