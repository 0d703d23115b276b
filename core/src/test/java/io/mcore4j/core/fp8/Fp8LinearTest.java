package io.mcore4j.core.fp8;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import com.google.gson.JsonArray;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.nn.Parameter;

import java.io.InputStreamReader;
import java.io.Reader;
import java.nio.charset.StandardCharsets;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The FP8 linear in bf16 against {@code scripts/fp8/fp8_linear_reference.py} (the recipe's casts and GEMMs in plain
 * torch): forward output and the three gradients for two steps of delayed scaling (scale 1, then the scales from
 * step 1's amaxes, which also proves the weight is cast again after the update) and one tensorwise step; the
 * recorded amaxes bit for bit; and the FP8 output within FP8's error of the float32 linear.
 */
class Fp8LinearTest {
    private static JsonObject fixture;

    @BeforeAll
    static void load() throws Exception {
        try (Reader r = new InputStreamReader(Fp8LinearTest.class.getResourceAsStream("fp8_linear.json"), StandardCharsets.UTF_8)) {
            fixture = JsonParser.parseReader(r).getAsJsonObject();
        }
    }

    @Test
    void delayedScalingTwoStepsMatchTheReference() {
        JsonArray shape = fixture.getAsJsonArray("shape");
        int s = shape.get(0).getAsInt(), b = shape.get(1).getAsInt(), k = shape.get(2).getAsInt(), n = shape.get(3).getAsInt();
        try (NDManager m = Mcore4j.newRootManager();
             Fp8Scaling scaling = new Fp8Scaling(Fp8Config.of(Fp8Format.HYBRID), m);
             Fp8Linear linear = new Fp8Linear("fc1", scaling, m)) {
            Parameter w = Parameter.replicated("weight", bf16(m, fixture.getAsJsonArray("w"), new Shape(n, k)));
            NDArray bias = bf16(m, fixture.getAsJsonArray("b"), new Shape(n));
            bias.setRequiresGradient(true);
            JsonArray steps = fixture.getAsJsonArray("delayed");
            for (int step = 0; step < steps.size(); step++) {
                JsonObject want = steps.get(step).getAsJsonObject();
                w.zeroGradient();
                Tensors.zeroGradient(bias);
                NDArray x = bf16(m, want.getAsJsonArray("x"), new Shape(s, b, k));
                x.setRequiresGradient(true);
                try (AutogradScope scope = AutogradScope.open(m)) {
                    NDArray y = linear.apply(scope, x, w, bias);
                    assertClose(floats(want.getAsJsonArray("y")), f32(y), "step " + step + " y");
                    scope.backward(new NDArray[] {y}, new NDArray[] {bf16(m, want.getAsJsonArray("dy"), new Shape(s, b, n))});
                }
                assertClose(floats(want.getAsJsonArray("dx")), f32(Tensors.gradientOrNull(x, m)), "step " + step + " dx");
                assertClose(floats(want.getAsJsonArray("dw")), f32(w.gradient(m)), "step " + step + " dW");
                assertClose(floats(want.getAsJsonArray("db")), f32(Tensors.gradientOrNull(bias, m)), "step " + step + " db");
                float[] amax = java.util.Arrays.copyOf(scaling.history().toFloatArray(), 3);
                assertArrayEquals(floats(want.getAsJsonArray("amax")), amax, 0f, "step " + step + " amaxes (x, W, dy)");
                scaling.update(current -> current);
            }
        }
    }

    @Test
    void tensorwiseScalingMatchesTheReference() {
        JsonArray shape = fixture.getAsJsonArray("shape");
        int s = shape.get(0).getAsInt(), b = shape.get(1).getAsInt(), k = shape.get(2).getAsInt(), n = shape.get(3).getAsInt();
        JsonObject step = fixture.getAsJsonArray("delayed").get(1).getAsJsonObject();
        JsonObject want = fixture.getAsJsonObject("tensorwise");
        try (NDManager m = Mcore4j.newRootManager();
             Fp8Scaling scaling = new Fp8Scaling(Fp8Config.of(Fp8Format.HYBRID).withRecipe(Fp8Recipe.TENSORWISE), m);
             Fp8Linear linear = new Fp8Linear("fc1", scaling, m)) {
            Parameter w = Parameter.replicated("weight", bf16(m, fixture.getAsJsonArray("w"), new Shape(n, k)));
            NDArray bias = bf16(m, fixture.getAsJsonArray("b"), new Shape(n));
            NDArray x = bf16(m, step.getAsJsonArray("x"), new Shape(s, b, k));
            x.setRequiresGradient(true);
            try (AutogradScope scope = AutogradScope.open(m)) {
                NDArray y = linear.apply(scope, x, w, bias);
                assertClose(floats(want.getAsJsonArray("y")), f32(y), "tensorwise y");
                float relative = relativeError(f32(y), float32Linear(m, x, w.data(), bias));
                assertTrue(relative < 0.05, "FP8 output's relative error to the float32 linear " + relative);
                scope.backward(new NDArray[] {y}, new NDArray[] {bf16(m, step.getAsJsonArray("dy"), new Shape(s, b, n))});
            }
            assertClose(floats(want.getAsJsonArray("dx")), f32(Tensors.gradientOrNull(x, m)), "tensorwise dx");
            assertClose(floats(want.getAsJsonArray("dw")), f32(w.gradient(m)), "tensorwise dW");
        }
    }

    @Test
    void dimsThatAreNotMultiplesOf16AreRefusedByName() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Fp8Linear.checkDims("fc2", 40, 32));
        assertEquals("fc2: FP8 GEMMs need dims that are multiples of 16; this rank's weight is [32, 40]", e.getMessage());
        try (NDManager m = Mcore4j.newRootManager();
             Fp8Scaling scaling = new Fp8Scaling(Fp8Config.of(Fp8Format.E4M3), m);
             Fp8Linear linear = new Fp8Linear("fc1", scaling, m);
             AutogradScope scope = AutogradScope.open(m)) {
            NDArray x = m.ones(new Shape(3, 32));
            Parameter w = Parameter.replicated("weight", m.ones(new Shape(16, 32)));
            IllegalArgumentException tokens = assertThrows(IllegalArgumentException.class, () -> linear.apply(scope, x, w, null));
            assertTrue(tokens.getMessage().contains("token count"), tokens.getMessage());
        }
    }

    @Test
    void theReferenceCastWritesTheTransposedCopyAndRecordsTheAmaxAndTheCpuHasNoFusedCast() {
        try (NDManager m = Mcore4j.newRootManager();
             Fp8Scaling scaling = new Fp8Scaling(Fp8Config.of(Fp8Format.HYBRID), m)) {
            scaling.register("fc1");
            Tensors.copyInto(scaling.scale(), m.create(new float[] {2f, 1f, 1000f}));
            float[] v = new float[16 * 32];
            for (int i = 0; i < v.length; i++) {
                v[i] = (float) Math.sin(i) * 0.3f;
            }
            v[5] = 1f; // the amax
            NDArray x = DataTypes.toType(m.create(v, new Shape(16, 32)), DataType.BFLOAT16, false);
            Fp8Kernels kernels = Fp8Kernels.get();
            Fp8Kernels.Quantized q = kernels.quantize(x, scaling, 2, false);
            float[] copy = kernels.widen(q.q()).toFloatArray();
            float[] transposed = kernels.widen(q.qT()).toFloatArray();
            assertEquals(new Shape(32, 16), q.qT().getShape());
            float[] xs = f32(x);
            for (int r = 0; r < 16; r++) {
                for (int c = 0; c < 32; c++) {
                    assertEquals(copy[r * 32 + c], transposed[c * 16 + r], 0f, "transposed copy at " + r + ", " + c);
                    // e5m2 keeps 2 mantissa bits: within 2^-3 of the scaled value
                    float scaled = xs[r * 32 + c] * 1000f;
                    assertTrue(Math.abs(copy[r * 32 + c] - scaled) <= Math.abs(scaled) / 8f + 1e-3f, r + ", " + c);
                }
            }
            assertEquals(1f, scaling.history().toFloatArray()[2], 0f, "the output gradient slot's amax");
            IllegalStateException none = assertThrows(IllegalStateException.class, () -> kernels.quantize(x, scaling, 2, true));
            assertTrue(none.getMessage().contains("cpu()"), none.getMessage());
        }
    }

    /**
     * The cast is kept across micro-batches whose gradients are set to none in between (what data parallelism does
     * after each micro-batch's reduce-scatter under ZeRO-2/3, which renews the weight's tensor handle) and redone when
     * the weights' values change: after a checkpoint is written into the weight in place (the restore starts a new
     * generation) and after an optimizer step's update.
     */
    @Test
    void theCastIsReusedAcrossMicroBatchesAndRedoneWhenTheWeightIsWritten() {
        try (NDManager m = Mcore4j.newRootManager();
             Fp8Scaling scaling = new Fp8Scaling(Fp8Config.of(Fp8Format.HYBRID), m);
             Fp8Linear linear = new Fp8Linear("fc1", scaling, m)) {
            Parameter w = Parameter.replicated("weight", DataTypes.toType(waves(m, 0.37, 0.05), DataType.BFLOAT16, false));
            NDArray x = DataTypes.toType(waves(m, 0.61, 1), DataType.BFLOAT16, false);
            float[] first = microBatch(m, linear, x, w);
            w.clearGradient();
            float[] second = microBatch(m, linear, x, w);
            assertEquals(1, scaling.weightCasts(), "casts after two micro-batches of one step");
            assertArrayEquals(first, second, 0f);

            var saved = scaling.shardedState("fp8.", m);
            Tensors.copyInto(w.data(), w.data().mul(2));
            scaling.loadShardedState("fp8.", saved);
            w.clearGradient();
            float[] written = microBatch(m, linear, x, w);
            assertEquals(2, scaling.weightCasts(), "casts after a checkpoint was written into the weight");
            float[] doubled = new float[first.length];
            for (int i = 0; i < first.length; i++) {
                doubled[i] = 2 * first[i];
            }
            float relative = relativeError(written, doubled);
            assertTrue(relative < 0.05, "output of the doubled weight against twice the first output: relative error " + relative);

            scaling.update(current -> current);
            microBatch(m, linear, x, w);
            assertEquals(3, scaling.weightCasts(), "casts after the optimizer step's update");
        }
    }

    /** @return {@code [16, 32]} float32 values {@code amplitude·sin(frequency·i)}, i the flat index */
    private static NDArray waves(NDManager m, double frequency, double amplitude) {
        float[] values = new float[16 * 32];
        for (int i = 0; i < values.length; i++) {
            values[i] = (float) (amplitude * Math.sin(frequency * i));
        }
        return m.create(values, new Shape(16, 32));
    }

    /** One forward and backward of {@code linear}; returns the output as float32. */
    private static float[] microBatch(NDManager m, Fp8Linear linear, NDArray x, Parameter w) {
        try (AutogradScope scope = AutogradScope.open(m)) {
            NDArray y = linear.apply(scope, x, w, null);
            float[] out = f32(y);
            scope.backward(new NDArray[] {y}, new NDArray[] {DataTypes.toType(m.ones(y.getShape()), DataType.BFLOAT16, false)});
            return out;
        }
    }

    private static float[] float32Linear(NDManager m, NDArray x, NDArray w, NDArray b) {
        NDArray x32 = DataTypes.toType(x, DataType.FLOAT32, false).stopGradient();
        NDArray w32 = DataTypes.toType(w, DataType.FLOAT32, false).stopGradient();
        NDArray b32 = DataTypes.toType(b, DataType.FLOAT32, false).stopGradient();
        return x32.matMul(w32.transpose()).add(b32).toFloatArray();
    }

    private static float relativeError(float[] got, float[] want) {
        double num = 0, den = 0;
        for (int i = 0; i < got.length; i++) {
            num += (got[i] - want[i]) * (double) (got[i] - want[i]);
            den += want[i] * (double) want[i];
        }
        return (float) Math.sqrt(num / den);
    }

    /** Equal up to float32 accumulation order and one bf16 rounding: 2^-7 of the value plus 2^-10 of the largest. */
    private static void assertClose(float[] want, float[] got, String what) {
        assertEquals(want.length, got.length, what);
        float max = 0;
        for (float v : want) {
            max = Math.max(max, Math.abs(v));
        }
        for (int i = 0; i < want.length; i++) {
            float tol = Math.abs(want[i]) / 128f + max / 1024f;
            if (!(Math.abs(want[i] - got[i]) <= tol)) {
                throw new AssertionError(what + " [" + i + "]: want " + want[i] + " got " + got[i]);
            }
        }
    }

    private static NDArray bf16(NDManager m, JsonArray values, Shape shape) {
        return DataTypes.toType(m.create(floats(values), shape), DataType.BFLOAT16, false);
    }

    private static float[] f32(NDArray x) {
        return DataTypes.toType(x, DataType.FLOAT32, false).toFloatArray();
    }

    private static float[] floats(JsonArray values) {
        float[] out = new float[values.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = values.get(i).getAsFloat();
        }
        return out;
    }
}
