package io.mcore4j.samples.bench;

import ai.djl.Device;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.fp8.Fp8Config;
import io.mcore4j.core.fp8.Fp8Format;
import io.mcore4j.core.fp8.Fp8Kernels;
import io.mcore4j.core.fp8.Fp8Recipe;
import io.mcore4j.core.fp8.Fp8Scaling;

import java.util.Random;

/**
 * The GPU check of the fused float8 cast (issue 35; needs a CUDA device of compute capability 8.9 or newer):
 * {@code java -cp <jars> io.mcore4j.samples.bench.Fp8CastCheck}. For bfloat16, float16 and float32 inputs, e4m3
 * (an input slot) and e5m2 (an output-gradient slot under {@code hybrid}), delayed and tensorwise scaling, and shapes
 * that fill whole 64 x 64 tiles or end in partial ones, casts the same tensor with the device's fused kernel and with
 * the TorchScript reference ({@link Fp8Kernels#quantize(NDArray, Fp8Scaling, int, boolean)}, two scaling states with
 * the same scales) and expects bit-equal float8 copies and transposed copies ({@link Fp8Kernels#widen}: a NaN's sign
 * included), the same recorded amax (delayed) and the same inverse scale (tensorwise). Each input comes plain (the
 * amax is then a finite value) and with NaN, -NaN, +-inf, +-1e30, values just above the format's largest, ties
 * between two float8 values, subnormals and -0 written into it (the amax must be NaN). Prints one {@code PASS}/
 * {@code FAIL} line per expectation, then the time of one cast of a [8192, 8192] bfloat16 tensor each way (a figure,
 * not a check); exits 1 on any failure.
 */
public final class Fp8CastCheck {
    private static final long[][] SHAPES = {{4096, 1024}, {80, 48}, {16, 16}, {1040, 2064}};
    private int failed;

    private Fp8CastCheck() {}

    /** @param args optionally the device's name ({@code gpu(0)} unless given) */
    public static void main(String[] args) {
        Mcore4j.ensureInitialized();
        Fp8CastCheck check = new Fp8CastCheck();
        Device gpu = args.length > 0 ? Device.fromName(args[0]) : Device.gpu();
        try (NDManager m = Mcore4j.newRootManager().newSubManager(gpu)) {
            for (DataType dtype : new DataType[] {DataType.BFLOAT16, DataType.FLOAT16, DataType.FLOAT32}) {
                for (long[] dims : SHAPES) {
                    for (boolean special : new boolean[] {false, true}) {
                        for (Fp8Recipe recipe : Fp8Recipe.values()) {
                            check.compare(m, dtype, new Shape(dims), special, recipe, false);
                            check.compare(m, dtype, new Shape(dims), special, recipe, true);
                        }
                    }
                }
            }
            time(m);
        }
        System.out.println(check.failed == 0 ? "Fp8CastCheck: all passed" : "Fp8CastCheck: " + check.failed + " failed");
        System.exit(check.failed == 0 ? 0 : 1);
    }

    private void compare(NDManager m, DataType dtype, Shape shape, boolean special, Fp8Recipe recipe, boolean e5m2) {
        String what = dtype + " " + shape + (e5m2 ? " e5m2" : " e4m3") + " " + recipe.name().toLowerCase()
                + (special ? " with NaN/inf/saturating/tie/subnormal values" : "");
        int slot = e5m2 ? 2 : 0; // the grad-output slot casts to e5m2 under hybrid
        float scale = e5m2 ? 300f : 2.5f;
        try (NDManager temp = m.newSubManager()) {
            NDArray x = input(temp, dtype, shape, special, e5m2, scale);
            Fp8Config config = Fp8Config.of(Fp8Format.HYBRID).withRecipe(recipe);
            try (Fp8Scaling fusedState = state(config, temp, scale); Fp8Scaling referenceState = state(config, temp, scale)) {
                Fp8Kernels kernels = Fp8Kernels.get();
                Fp8Kernels.Quantized fused = kernels.quantize(x, fusedState, slot, true);
                Fp8Kernels.Quantized reference = kernels.quantize(x, referenceState, slot, false);
                expect(sameBits(kernels.widen(fused.q()), kernels.widen(reference.q())), what + ": float8 copy bit for bit");
                expect(sameBits(kernels.widen(fused.qT()), kernels.widen(reference.qT())), what + ": transposed copy bit for bit");
                expect(sameBits(fused.inverseScale(), reference.inverseScale()), what + ": inverse scale");
                if (recipe == Fp8Recipe.DELAYED) {
                    float got = fusedState.history().toFloatArray()[slot];
                    float want = referenceState.history().toFloatArray()[slot];
                    boolean ok = Float.floatToIntBits(got) == Float.floatToIntBits(want) && (special == Float.isNaN(want));
                    expect(ok, what + ": amax recorded (" + got + ", reference " + want + ")");
                }
            }
        } catch (RuntimeException e) {
            expect(false, what + ": " + e);
        }
    }

    private static Fp8Scaling state(Fp8Config config, NDManager m, float scale) {
        Fp8Scaling s = new Fp8Scaling(config, m);
        s.register("check");
        Tensors.copyInto(s.scale(), m.full(new Shape(3), scale));
        Tensors.copyInto(s.scaleInv(), m.full(new Shape(3), 1f / scale));
        return s;
    }

    /** A normal tensor (standard deviation 60 / scale: some values saturate) with the special values at fixed places. */
    private static NDArray input(NDManager m, DataType dtype, Shape shape, boolean special, boolean e5m2, float scale) {
        Random random = new Random(shape.size() * 31 + (e5m2 ? 1 : 0));
        float[] v = new float[Math.toIntExact(shape.size())];
        for (int i = 0; i < v.length; i++) {
            v[i] = (float) random.nextGaussian() * 60f / scale;
        }
        if (special) {
            float max = e5m2 ? 57344f : 448f;
            // ties: halfway between neighbours of the format (e4m3 at 1.0 steps 1/8; e5m2 steps 1/4), and at the top
            float tie = e5m2 ? 1.125f : 1.0625f;
            float[] values = {Float.NaN, -Float.NaN, Float.intBitsToFloat(0xffc00000), Float.POSITIVE_INFINITY,
                Float.NEGATIVE_INFINITY, 1e30f, -1e30f, max * 1.03f, -max * 1.03f, max * 1.0001f, tie, -tie, tie + (e5m2 ? 0.25f : 0.125f),
                1e-3f, -1e-3f, 3e-5f, 1e-7f, -1e-7f, -0f, 0f};
            for (int i = 0; i < values.length; i++) {
                v[(int) ((i * 7919L) % v.length)] = values[i] / scale;
            }
        }
        NDArray x = m.create(v, shape);
        return dtype == DataType.FLOAT32 ? x : DataTypes.toType(x, dtype, false);
    }

    private static boolean sameBits(NDArray a, NDArray b) {
        if (!a.getShape().equals(b.getShape())) {
            return false;
        }
        float[] x = a.toFloatArray();
        float[] y = b.toFloatArray();
        for (int i = 0; i < x.length; i++) {
            if (Float.floatToRawIntBits(x[i]) != Float.floatToRawIntBits(y[i])) {
                System.out.printf("  first difference at %d: %s (0x%08x) vs reference %s (0x%08x)%n", i, x[i],
                        Float.floatToRawIntBits(x[i]), y[i], Float.floatToRawIntBits(y[i]));
                return false;
            }
        }
        return true;
    }

    private void expect(boolean ok, String what) {
        System.out.println((ok ? "PASS " : "FAIL ") + what);
        if (!ok) {
            failed++;
        }
    }

    /** Prints the milliseconds of one delayed-scaling cast of a [8192, 8192] bfloat16 tensor, fused and reference. */
    private static void time(NDManager m) {
        try (NDManager temp = m.newSubManager()) {
            NDArray x = DataTypes.toType(temp.randomNormal(new Shape(8192, 8192)), DataType.BFLOAT16, false);
            Fp8Config config = Fp8Config.of(Fp8Format.HYBRID);
            try (Fp8Scaling state = state(config, temp, 2.5f)) {
                for (boolean fused : new boolean[] {true, false}) {
                    double ms = 0;
                    for (int i = -3; i < 20; i++) {
                        if (i == 0) {
                            temp.zeros(new Shape(1)).getFloat(0);
                            ms = System.nanoTime();
                        }
                        try (NDManager call = temp.newSubManager()) {
                            Fp8Kernels.Quantized q = Fp8Kernels.get().quantize(x, state, 0, fused);
                            q.q().attach(call);
                            q.qT().attach(call);
                            q.inverseScale().attach(call);
                        }
                    }
                    temp.zeros(new Shape(1)).getFloat(0);
                    ms = (System.nanoTime() - ms) / 1e6 / 20;
                    System.out.printf("TIME cast [8192, 8192] bf16 to e4m3 with transpose and amax, %s: %.3f ms (%.0f GB/s"
                            + " of 4 bytes an element)%n", fused ? "fused kernel" : "TorchScript reference", ms,
                            8192.0 * 8192 * 4 / ms / 1e6);
                }
            }
        }
    }
}
