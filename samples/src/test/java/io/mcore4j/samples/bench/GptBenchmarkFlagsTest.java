package io.mcore4j.samples.bench;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * {@code gpt-benchmark --model}: the presets under their flag names, their flags, and a value that
 * is no preset refused with exit code 2 and one line naming it, before anything runs.
 */
class GptBenchmarkFlagsTest {

    @Test
    void presetsAreNamedAsTheFlagTakesThem() {
        assertEquals("1.3b", GptBenchmark.Preset.gpt1_3b.toString());
        assertEquals(GptBenchmark.Preset.llama7b, GptBenchmark.Preset.of("llama7b"));
        List<String> tiny = GptBenchmark.presetFlags("tiny");
        assertEquals("2", tiny.get(tiny.indexOf("--num-layers") + 1));
        assertTrue(tiny.contains("--fp16") && tiny.contains("--mock-data"), tiny.toString());
        assertEquals("--model 7b is not one of 1.3b, llama7b, tiny, probe",
                assertThrows(IllegalArgumentException.class, () -> GptBenchmark.presetFlags("7b")).getMessage());
    }

    @Test
    void helpListsThePresetsAndAnUnknownOneExitsWithTwo() {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        assertEquals(0, GptBenchmark.execute(new String[] {"--help"}, print(out), print(err)));
        assertTrue(out.toString(StandardCharsets.UTF_8).contains("1.3b, llama7b, tiny, probe (probe:"),
                out.toString(StandardCharsets.UTF_8));

        err.reset();
        assertEquals(2, GptBenchmark.execute(new String[] {"--model", "7b", "--steps", "1"}, print(out), print(err)));
        String first = err.toString(StandardCharsets.UTF_8).lines().findFirst().orElse("");
        assertTrue(first.startsWith("gpt-benchmark: ") && first.contains("--model") && first.contains("'7b'"), first);
    }

    private static PrintStream print(ByteArrayOutputStream bytes) {
        return new PrintStream(bytes, true, StandardCharsets.UTF_8);
    }
}
