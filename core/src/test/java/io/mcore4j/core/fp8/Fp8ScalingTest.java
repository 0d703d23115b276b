package io.mcore4j.core.fp8;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import io.mcore4j.core.Mcore4j;

import java.io.InputStreamReader;
import java.io.Reader;
import java.nio.charset.StandardCharsets;

import org.junit.jupiter.api.Test;

/**
 * The delayed-scaling state machine against {@code scripts/fp8/delayed_scaling_reference.py}, Transformer Engine's
 * recipe written in plain Python: 6 configurations (history 1 to 16, max and most_recent, margin 0 to 2) of 24 steps,
 * with amaxes of 0, infinity, NaN, a subnormal (whose scale overflows) and ordinary values; every scale and every
 * history entry equal bit for bit.
 */
class Fp8ScalingTest {

    @Test
    void delayedScalingMatchesThePythonReferenceBitForBit() throws Exception {
        JsonObject fixture;
        try (Reader r = new InputStreamReader(getClass().getResourceAsStream("delayed_scaling.json"), StandardCharsets.UTF_8)) {
            fixture = JsonParser.parseReader(r).getAsJsonObject();
        }
        int checked = 0;
        for (JsonElement c : fixture.getAsJsonArray("cases")) {
            JsonObject kase = c.getAsJsonObject();
            Fp8Config config = Fp8Config.of(Fp8Format.HYBRID).withMargin(kase.get("margin").getAsInt())
                    .withAmaxHistory(kase.get("amax_history_len").getAsInt(),
                            AmaxComputeAlgo.of(kase.get("amax_compute_algo").getAsString()));
            try (NDManager m = Mcore4j.newRootManager(); Fp8Scaling scaling = new Fp8Scaling(config, m)) {
                scaling.register("layer.fc1");
                JsonArray amaxes = kase.getAsJsonArray("amax");
                JsonArray expected = kase.getAsJsonArray("expected");
                for (int step = 0; step < amaxes.size(); step++) {
                    float[] observed = floats(amaxes.get(step).getAsJsonArray());
                    scaling.update(current -> m.create(observed));
                    JsonObject want = expected.get(step).getAsJsonObject();
                    String where = config + " step " + step;
                    assertBits(floats(want.getAsJsonArray("scale")), scaling.scale().toFloatArray(), where + " scale");
                    float[] inv = scaling.scaleInv().toFloatArray();
                    float[] scale = scaling.scale().toFloatArray();
                    for (int i = 0; i < inv.length; i++) {
                        assertEquals(1f / scale[i], inv[i], where + " scale_inv");
                    }
                    JsonArray rows = want.getAsJsonArray("history");
                    float[] history = scaling.history().toFloatArray();
                    for (int row = 0; row < rows.size(); row++) {
                        float[] got = java.util.Arrays.copyOfRange(history, row * 3, row * 3 + 3);
                        assertBits(floats(rows.get(row).getAsJsonArray()), got, where + " history row " + row);
                    }
                    checked++;
                }
                assertEquals(amaxes.size(), scaling.generation());
            }
        }
        assertEquals(144, checked);
    }

    @Test
    void tensorwiseUpdatesOnlyTheGenerationAndRegistrationClosesAtAllocation() {
        try (NDManager m = Mcore4j.newRootManager();
             Fp8Scaling scaling = new Fp8Scaling(Fp8Config.of(Fp8Format.E4M3).withRecipe(Fp8Recipe.TENSORWISE), m)) {
            assertEquals(new Fp8Scaling.Slots(0, 1, 2), scaling.register("a"));
            assertEquals(new Fp8Scaling.Slots(3, 4, 5), scaling.register("b"));
            assertThrows(IllegalArgumentException.class, () -> scaling.register("a"));
            scaling.update(x -> {
                throw new AssertionError("tensorwise scaling reduces nothing");
            });
            assertEquals(1, scaling.generation());
            assertArrayEquals(new float[] {1, 1, 1, 1, 1, 1}, scaling.scale().toFloatArray());
            // 16 bytes a slot: the GEMMs' scale views start on the boundaries cuBLASLt needs
            assertEquals(new ai.djl.ndarray.types.Shape(6, 4), scaling.scaleBuffer().getShape());
            assertEquals(new ai.djl.ndarray.types.Shape(6, 4), scaling.scaleInvBuffer().getShape());
            IllegalStateException late = assertThrows(IllegalStateException.class, () -> scaling.register("c"));
            assertTrue(late.getMessage().contains("FP8 linear c registered after"), late.getMessage());
        }
    }

    @Test
    void configAndFlagValuesAreValidatedByName() {
        assertEquals(Fp8Format.HYBRID, Fp8Format.of("hybrid"));
        assertEquals(AmaxComputeAlgo.MOST_RECENT, AmaxComputeAlgo.of("most_recent"));
        IllegalArgumentException mx = assertThrows(IllegalArgumentException.class, () -> Fp8Recipe.of("mxfp8"));
        assertTrue(mx.getMessage().contains("--fp8-recipe mxfp8: block-scaled"), mx.getMessage());
        assertThrows(IllegalArgumentException.class, () -> Fp8Recipe.of("blockwise"));
        IllegalArgumentException len = assertThrows(IllegalArgumentException.class,
                () -> Fp8Config.of(Fp8Format.E4M3).withAmaxHistory(0, AmaxComputeAlgo.MAX));
        assertEquals("--fp8-amax-history-len 0 must be at least 1", len.getMessage());
        Fp8Config edges = Fp8Config.of(Fp8Format.HYBRID).withBf16Layers(1, 2);
        assertEquals("[false, true, true, false, false]", java.util.Arrays.toString(new boolean[] {
                edges.fp8Layer(0, 5), edges.fp8Layer(1, 5), edges.fp8Layer(2, 5), edges.fp8Layer(3, 5), edges.fp8Layer(4, 5)}));
        assertThrows(IllegalArgumentException.class, () -> edges.checkLayers(3));
    }

    private static float[] floats(JsonArray values) {
        float[] out = new float[values.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = (float) Double.parseDouble(values.get(i).getAsString());
        }
        return out;
    }

    private static void assertBits(float[] want, float[] got, String where) {
        assertEquals(want.length, got.length, where);
        for (int i = 0; i < want.length; i++) {
            if (Float.compare(want[i], got[i]) != 0 && !(Float.isNaN(want[i]) && Float.isNaN(got[i]))) {
                throw new AssertionError(where + " [" + i + "]: want " + want[i] + " got " + got[i]);
            }
        }
    }
}
