package io.mcore4j.hf;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.parallel.ParallelDims;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.TreeMap;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Every fixture imported at TP2 x PP2 (Mixtral, Qwen3-MoE: TP2 x EP2 x PP2 would need 8 ranks; they run at
 * TP2 x PP2 with 1 expert-parallel rank) and exported: the files hold exactly the tensors of the
 * original checkpoint with the original values (f32), or the original values rounded to nearest
 * even bf16 (bf16), and, where that is lossless, the export imported again at TP1 gives
 * transformers' logits. The exports stay under
 * {@code target/hf-export/<fixture>-<dtype>} for {@code scripts/hf/check_export.py}.
 */
class HfExportTest {
    private static final Path OUT = Path.of("target", "hf-export");

    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"llama", "qwen2", "qwen2_window", "qwen3", "mistral", "mixtral", "gpt2", "gemma3", "qwen3_moe",
        "deepseek_v3"})
    void roundTripAtTp2Pp2(String name) throws IOException {
        Path source = Fixtures.dir(name);
        for (HfDtype dtype : new HfDtype[] {HfDtype.F32, HfDtype.BF16}) {
            Path out = OUT.resolve(name + "-" + dtype.name().toLowerCase(java.util.Locale.ROOT));
            ParallelDims dims = ParallelDims.of(4, 2, 2);
            float[][] before = Fixtures.logits(source, dims, Fixtures.prompt(name), (model, groups) -> {
                try (HfCheckpoint ck = HfCheckpoint.open(source)) {
                    HfExport.write(out, ck.config(), java.util.List.of(model), groups.world(), dtype,
                            name.equals("mistral") ? 40_000 : HfExport.DEFAULT_MAX_SHARD_BYTES);
                }
            });
            double imported = Fixtures.relativeError(before, Fixtures.referenceLogits(name));
            float[][] after = Fixtures.logits(out, ParallelDims.of(1, 1, 1), Fixtures.prompt(name), null);
            double error = Fixtures.relativeError(after, Fixtures.referenceLogits(name));
            System.out.printf("%s exported as %s at TP2xPP2, imported at TP1: logits relative error %.3g (before export %.3g)%n",
                    name, dtype, error, imported);
            boolean lossless = dtype == HfDtype.F32 || storedDtype(source) == HfDtype.BF16;
            if (lossless) {
                assertTrue(error <= 1e-5, name + " " + dtype + ": " + error);
            }
            assertSameTensors(source, out, dtype == HfDtype.BF16);
        }
    }

    /** Sharded output: the index names every tensor and each lands in its file. */
    @Test
    void shardedExportHasAnIndex() throws IOException {
        Path out = OUT.resolve("mistral-f32");
        if (!Files.exists(out.resolve("model.safetensors.index.json"))) {
            roundTripAtTp2Pp2("mistral");
        }
        try (HfCheckpoint ck = HfCheckpoint.open(out)) {
            assertEquals(HfArchitecture.MISTRAL, ck.config().architecture());
        }
        assertTrue(Files.exists(out.resolve("model-00001-of-00003.safetensors")) || Files.exists(out.resolve("model-00001-of-00004.safetensors")),
                "expected several shard files in " + out);
    }

    private static HfDtype storedDtype(Path dir) {
        try (HfCheckpoint ck = HfCheckpoint.open(dir)) {
            return ck.tensorDtypes().values().iterator().next();
        }
    }

    /** Same tensor names and values (read as float32; the expected ones rounded to bf16 first when asked). */
    private static void assertSameTensors(Path expected, Path actual, boolean roundToBf16) {
        try (HfCheckpoint a = HfCheckpoint.open(expected); HfCheckpoint b = HfCheckpoint.open(actual)) {
            Map<String, float[]> x = new TreeMap<>(a.readAll());
            Map<String, float[]> y = new TreeMap<>(b.readAll());
            assertEquals(x.keySet(), y.keySet());
            for (String k : x.keySet()) {
                float[] want = x.get(k).clone();
                if (roundToBf16 && !k.endsWith(".e_score_correction_bias")) { // kept in float32, as transformers keeps it
                    for (int i = 0; i < want.length; i++) {
                        want[i] = Float.intBitsToFloat(HfDtype.floatToBfloat16(want[i]) << 16);
                    }
                }
                assertArrayEquals(want, y.get(k), k);
            }
        }
    }
}
