package io.mcore4j.training.metrics;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class MetricsSinksTest {
    @TempDir
    Path dir;

    /** The scalars the tests (and scripts/metrics/check_tensorboard.py) expect at iteration i. */
    static Map<String, Double> scalars(long i) {
        Map<String, Double> m = new LinkedHashMap<>();
        m.put(MetricNames.LOSS, 5.0 / i);
        m.put(MetricNames.LEARNING_RATE, 1e-3 * i);
        m.put(MetricNames.GRAD_NORM, 0.5 + i);
        m.put(MetricNames.LOSS_SCALE, 1024.0);
        m.put(MetricNames.TOKENS_PER_SECOND, 1000.0 * i);
        m.put(MetricNames.MEMORY_GIB, 1.5);
        return m;
    }

    @Test
    void jsonlKeepsOneRunPerFileAndAResumedRunAppendsAfterItsStart() {
        Path file = dir.resolve("metrics.jsonl");
        try (JsonlMetricsSink s = new JsonlMetricsSink(file)) {
            s.begin(0, 30);
            for (long i = 10; i <= 30; i += 10) {
                s.write(i, scalars(i));
            }
        }
        // resumed from the checkpoint of iteration 20: iteration 30 is repeated, not duplicated
        try (JsonlMetricsSink s = new JsonlMetricsSink(file)) {
            s.begin(20, 40);
            s.write(30, scalars(30));
            s.write(40, scalars(40));
        }
        List<Map<String, Double>> r = JsonlMetricsSink.read(file);
        assertEquals(List.of(10.0, 20.0, 30.0, 40.0), r.stream().map(m -> m.get("iteration")).toList());
        assertEquals(5.0 / 40, r.get(3).get(MetricNames.LOSS), 0);
        assertEquals(0.04, r.get(3).get(MetricNames.LEARNING_RATE), 1e-15);
        // a fresh run moves the old records aside
        try (JsonlMetricsSink s = new JsonlMetricsSink(file)) {
            s.begin(0, 10);
            Map<String, Double> nan = new LinkedHashMap<>(scalars(1));
            nan.put(MetricNames.GRAD_NORM, Double.NaN);
            s.write(1, nan);
        }
        assertEquals(4, JsonlMetricsSink.read(dir.resolve("metrics.jsonl.1")).size());
        List<Map<String, Double>> fresh = JsonlMetricsSink.read(file);
        assertEquals(1, fresh.size());
        assertTrue(fresh.get(0).get(MetricNames.GRAD_NORM).isNaN());
    }

    @Test
    void tensorBoardRecordsAreFramedEventsWithMaskedCrc() throws IOException {
        Path tb = Path.of(System.getProperty("mcore4j.tensorboard.out", dir.resolve("tb").toString()));
        TensorBoardSink sink = new TensorBoardSink(tb);
        sink.begin(0, 3);
        for (long i = 1; i <= 3; i++) {
            sink.write(i, scalars(i));
        }
        sink.close();
        byte[] bytes = Files.readAllBytes(sink.file());
        ByteBuffer b = ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN);
        List<byte[]> records = new ArrayList<>();
        while (b.hasRemaining()) {
            long length = b.getLong();
            assertEquals(TensorBoardSink.maskedCrc32c(bytes, b.position() - 8, 8), b.getInt());
            byte[] payload = new byte[(int) length];
            int at = b.position();
            b.get(payload);
            assertEquals(TensorBoardSink.maskedCrc32c(bytes, at, (int) length), b.getInt());
            records.add(payload);
        }
        assertEquals(1 + 3 * 6, records.size());
        assertTrue(new String(records.get(0), StandardCharsets.UTF_8).contains("brain.Event:2"));
        // second record: step 1, summary value "lm loss" = 5.0f
        byte[] r = records.get(1);
        assertEquals(0x09, r[0]); // field 1 (wall_time), fixed64
        assertArrayEquals(new byte[] {0x10, 0x01}, new byte[] {r[9], r[10]}); // field 2 (step) = 1
        String text = new String(r, StandardCharsets.ISO_8859_1);
        assertTrue(text.contains("lm loss"), text);
        int tag = text.indexOf("lm loss") + "lm loss".length();
        assertEquals(0x15, r[tag]); // field 2 (simple_value), fixed32
        assertEquals(5.0f, ByteBuffer.wrap(r, tag + 1, 4).order(ByteOrder.LITTLE_ENDIAN).getFloat());
    }

    @Test
    void maskedCrcMatchesTheTfRecordReference() {
        // crc32c("") = 0, so its mask is the constant; crc32c("123456789") = 0xe3069283 (the CRC-32C check value)
        assertEquals(0xa282ead8, TensorBoardSink.maskedCrc32c(new byte[0], 0, 0));
        int c = 0xe3069283;
        assertEquals(((c >>> 15) | (c << 17)) + 0xa282ead8,
                TensorBoardSink.maskedCrc32c("123456789".getBytes(StandardCharsets.US_ASCII), 0, 9));
    }

    @Test
    void consoleLinesUseFourSignificantDigitsAndMfuOnlyWithAPeak() {
        Map<String, Double> m = new LinkedHashMap<>();
        m.put(MetricNames.LOSS, 4.123456);
        m.put(MetricNames.LEARNING_RATE, 0.0003);
        m.put(MetricNames.TFLOPS_PER_RANK, 0.00123456);
        m.put(MetricNames.TOKENS_PER_SECOND, 12345.678);
        String without = ConsoleMetricsSink.line(20, 120, m, null);
        assertEquals(" iteration 20/120 | lm loss 4.123 | learning-rate 3.000e-04 | throughput/tflops-per-gpu 0.001235"
                + " | throughput/tokens-per-sec 12350", without);
        m.put(MetricNames.TFLOPS_PER_RANK, 494.5);
        assertTrue(ConsoleMetricsSink.line(20, 120, m, 989.0).contains("| throughput/tflops-per-gpu 494.5 | MFU 50%"));
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        try (ConsoleMetricsSink s = new ConsoleMetricsSink(new PrintStream(bytes, true, StandardCharsets.UTF_8), null, false)) {
            s.begin(0, 2);
            s.iterationDone(1, 2);
            s.write(2, Map.of(MetricNames.LOSS, 2.0));
            s.iterationDone(2, 2);
        }
        String out = bytes.toString(StandardCharsets.UTF_8);
        assertEquals(" iteration 2/2 | lm loss 2\n", out.replace("\r\n", "\n"));
        assertFalse(out.contains("\r"), "no bar when the output is not a terminal");
    }

    @Test
    void formattingAndTicks() {
        assertEquals("4.2", MetricFormat.significant(4.2, 4));
        assertEquals("12350", MetricFormat.significant(12345.678, 4));
        assertEquals("1.235e+06", MetricFormat.significant(1234567, 4));
        assertEquals("0.003", MetricFormat.significant(0.003, 4));
        assertArrayEquals(new double[] {2.5, 3, 3.5, 4, 4.5, 5}, LossCurvePlot.niceTicks(2.52, 4.96, 6));
        assertArrayEquals(new double[] {0, 20, 40, 60, 80, 100, 120}, LossCurvePlot.niceTicks(1, 120, 8));
    }

    @Test
    void lossCurveIsDrawnFromTheMetricsFileFromIterationOne() throws IOException {
        Path jsonl = dir.resolve("metrics.jsonl");
        try (JsonlMetricsSink s = new JsonlMetricsSink(jsonl)) {
            s.begin(0, 30);
            for (long i = 1; i <= 30; i++) {
                s.write(i, scalars(i));
            }
        }
        LossCurveSink curve = new LossCurveSink(dir.resolve("loss.png"), jsonl, "test run");
        curve.close();
        assertTrue(curve.drawn());
        byte[] png = Files.readAllBytes(dir.resolve("loss.png"));
        assertArrayEquals(new byte[] {(byte) 0x89, 'P', 'N', 'G'}, java.util.Arrays.copyOf(png, 4));
    }
}
