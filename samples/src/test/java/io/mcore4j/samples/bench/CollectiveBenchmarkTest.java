package io.mcore4j.samples.bench;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.samples.bench.CollectiveBenchmark.Dtype;
import io.mcore4j.samples.bench.CollectiveBenchmark.Op;
import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * {@code collective-benchmark}: nccl-tests' bus bandwidth factors, the line format against worked values, the element
 * counts, bad flags refused with exit code 2, and short runs on the CPU (a world of one and two in-JVM ranks) that
 * print one line per operation and size.
 */
class CollectiveBenchmarkTest {

    @Test
    void busBandwidthIsNcclTestsFactorOfTheAlgorithmBandwidth() {
        assertEquals(100.0, Op.all_reduce.busBandwidth(100, 2), 1e-12); // 2(n-1)/n = 1
        assertEquals(150.0, Op.all_reduce.busBandwidth(100, 4), 1e-12); // 1.5
        assertEquals(175.0, Op.all_reduce.busBandwidth(100, 8), 1e-12); // 1.75
        assertEquals(175.0, Op.all_reduce_out.busBandwidth(100, 8), 1e-12);
        assertEquals(50.0, Op.reduce_scatter.busBandwidth(100, 2), 1e-12); // (n-1)/n
        assertEquals(75.0, Op.all_gather.busBandwidth(100, 4), 1e-12);
        assertEquals(0.0, Op.all_reduce.busBandwidth(100, 1), 1e-12); // one rank moves nothing
        assertThrows(IllegalArgumentException.class, () -> Op.all_gather.busBandwidth(100, 0));
    }

    @Test
    void lineReportsTimeAndBandwidthsInTheSharedFormat() {
        long bytes = 32L << 20;
        double seconds = bytes / 272e9; // 123.36 us at 272 GB/s
        assertEquals("collective-benchmark op=all_reduce size=32.0MiB dtype=bf16 ranks=2 | time 123.4 us"
                + " | algbw 272.0 GB/s | busbw 272.0 GB/s", CollectiveBenchmark.line("collective-benchmark",
                Op.all_reduce, bytes, Dtype.bf16, 2, seconds));
        assertEquals("x op=all_gather size=1.0MiB dtype=fp32 ranks=4 | time 10.0 us | algbw 104.9 GB/s | busbw 78.6 GB/s",
                CollectiveBenchmark.line("x", Op.all_gather, 1L << 20, Dtype.fp32, 4, 10e-6));
    }

    @Test
    void elementsFillTheSizeWithAWholeNumberPerRank() {
        assertEquals(16L << 20, CollectiveBenchmark.elements(32, Dtype.bf16, 2)); // [8192, 2048] bf16
        assertEquals(1L << 18, CollectiveBenchmark.elements(1, Dtype.fp32, 4));
        assertEquals(3 * 174762L, CollectiveBenchmark.elements(1, Dtype.fp16, 3)); // 524288 elements, rounded down
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> CollectiveBenchmark.elements(1e-6, Dtype.fp32, 2));
        assertTrue(e.getMessage().contains("--sizes-mib 1.0E-6") && e.getMessage().contains("2 ranks"), e.getMessage());
    }

    @Test
    void badFlagsExitWithTwoNamingTheValue() {
        for (String[] argv : List.of(new String[] {"--dtype", "int8"}, new String[] {"--sizes-mib", "0"},
                new String[] {"--iterations", "0"}, new String[] {"--ops", "broadcast"})) {
            ByteArrayOutputStream err = new ByteArrayOutputStream();
            assertEquals(2, CollectiveBenchmark.execute(argv, print(new ByteArrayOutputStream()), print(err)),
                    List.of(argv).toString());
            String first = err.toString(StandardCharsets.UTF_8).lines().findFirst().orElse("");
            assertTrue(first.startsWith("collective-benchmark: ") && first.contains(argv[0]), first);
        }
    }

    @Test
    void runsOnTheCpuWithOneRankAndWithTwoInJvmRanks() {
        for (String nproc : List.of("1", "2")) {
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            ByteArrayOutputStream err = new ByteArrayOutputStream();
            int code = CollectiveBenchmark.execute(new String[] {"--nproc", nproc, "--sizes-mib", "0.1,0.2",
                    "--iterations", "2", "--warmup", "1", "--ops", "all_reduce,reduce_scatter,all_gather,all_reduce_out"},
                    print(out), print(err));
            assertEquals(0, code, err.toString(StandardCharsets.UTF_8));
            List<String> lines = out.toString(StandardCharsets.UTF_8).lines().toList();
            assertEquals(8, lines.size(), lines.toString()); // 4 ops x 2 sizes, rank 0 only
            assertTrue(lines.get(0).startsWith("collective-benchmark op=all_reduce size=0.1MiB dtype=bf16 ranks=" + nproc
                    + " | time "), lines.get(0));
            assertTrue(lines.get(5).startsWith("collective-benchmark op=all_gather size=0.2MiB"), lines.get(5));
            assertTrue(lines.get(7).startsWith("collective-benchmark op=all_reduce_out size=0.2MiB"), lines.get(7));
        }
    }

    private static PrintStream print(ByteArrayOutputStream bytes) {
        return new PrintStream(bytes, true, StandardCharsets.UTF_8);
    }
}
