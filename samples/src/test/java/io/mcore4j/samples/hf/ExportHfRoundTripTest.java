package io.mcore4j.samples.hf;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import io.mcore4j.hf.HfCheckpoint;

import java.nio.file.Path;

import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * {@code convert-hf} then {@code export-hf}, the commands end to end: hf-bridge's Gemma 3 fixture (bfloat16) converted
 * at PP2, and its Qwen3-MoE and DeepSeek-V3 fixtures (bfloat16; DeepSeek's expert bias float32) converted at EP2, each
 * exported at TP2 in bfloat16, come back with the same tensor names and bitwise the same values, and
 * the config that export-hf writes is read back as the same architecture (every fixture's export through
 * {@code HfExport} is HfExportTest's).
 */
class ExportHfRoundTripTest {
    @TempDir
    Path tmp;

    @ParameterizedTest(name = "{0}: converted at {1}, exported at {2}")
    @CsvSource({"gemma3, --pipeline-model-parallel-size, --tensor-model-parallel-size, bf16",
        "qwen3_moe, --expert-model-parallel-size, --tensor-model-parallel-size, bf16",
        "deepseek_v3, --expert-model-parallel-size, --tensor-model-parallel-size, bf16"})
    void convertedAndExportedTensorsAreTheOriginals(String fixture, String convertAxis, String exportAxis, String dtype) {
        Path source = Path.of("..", "hf-bridge", "src", "test", "resources", "hf", fixture);
        Path converted = tmp.resolve("converted");
        Path exported = tmp.resolve("exported");
        assertEquals(0, new picocli.CommandLine(new ConvertHf()).execute("--load-hf", source.toString(), "--save",
                converted.toString(), "--nproc", "2", convertAxis, "2", "--make-vocab-size-divisible-by", "8"));
        assertEquals(0, ExportHf.commandLine().execute("--load", converted.toString(), "--save-hf", exported.toString(),
                "--nproc", "2", exportAxis, "2", "--dtype", dtype));
        try (HfCheckpoint a = HfCheckpoint.open(source); HfCheckpoint b = HfCheckpoint.open(exported)) {
            assertEquals(a.config().architecture(), b.config().architecture());
            assertEquals(a.tensorNames(), b.tensorNames());
            for (String name : a.tensorNames()) {
                assertArrayEquals(a.readTensor(name), b.readTensor(name), name);
            }
        }
    }
}
