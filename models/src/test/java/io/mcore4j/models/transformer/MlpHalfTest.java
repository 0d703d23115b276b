package io.mcore4j.models.transformer;

import static io.mcore4j.core.testing.NativeArrays.assertClose;

import ai.djl.Device;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import ai.djl.nn.Activation;
import ai.djl.nn.norm.LayerNorm;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.fp8.Fp8Config;
import io.mcore4j.core.fp8.Fp8Format;
import io.mcore4j.core.fp8.Fp8Linear;
import io.mcore4j.core.fp8.Fp8Scaling;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.random.DeterministicRandom;

import org.junit.jupiter.api.Test;

/**
 * The second half of a GPT layer as one Function with a written-out backward ({@link MlpHalf}, its
 * composed bias gradients: the form every device without the CUDA kernel runs, and the reference of
 * that kernel's GPU check) against the same half through libtorch's autograd: the same output and the
 * same gradients for the input and all six parameters, over two micro-batches (the second adds into
 * the parameters' gradients in place), from gradients set to none and from gradients zeroed in place.
 */
class MlpHalfTest {
    private static final String[] NAMES = {"output", "input gradient", "LN weight", "LN bias", "fc1 weight", "fc1 bias",
        "fc2 weight", "fc2 bias"};

    @Test
    void writtenOutBackwardMatchesAutogradFromGradientsSetToNone() {
        compare(false);
    }

    @Test
    void writtenOutBackwardMatchesAutogradFromZeroedGradients() {
        compare(true);
    }

    private static void compare(boolean zeroed) {
        try (NDManager m = Mcore4j.newRootManager()) {
            DeterministicRandom r = new DeterministicRandom(3);
            int s = 5;
            int b = 2;
            int width = 16;
            int ffn = 48;
            int microBatches = 2;
            NDArray[] h = new NDArray[microBatches];
            NDArray[] upstream = new NDArray[microBatches];
            for (int k = 0; k < microBatches; k++) {
                h[k] = r.normal(m, new Shape(s, b, width), 0, 1, DataType.FLOAT32);
                upstream[k] = r.normal(m, new Shape(s, b, width), 0, 1, DataType.FLOAT32);
            }
            NDArray[] init = initialParameters(r, m, width, ffn);
            NDArray epsilon = m.newSubManager(Device.cpu()).create(1e-5);
            NDArray[][] results = new NDArray[2][];
            for (int pass = 0; pass < 2; pass++) {
                Parameter[] params = new Parameter[init.length];
                for (int i = 0; i < init.length; i++) {
                    params[i] = Parameter.replicated("p" + i, copy(init[i], m));
                    if (zeroed) {
                        Tensors.accumulateGradient(params[i].data(), params[i].data().zerosLike());
                    }
                }
                MlpHalf half = new MlpHalf(epsilon, null, null, null, null, null, params);
                NDArray[] kept = new NDArray[8];
                for (int k = 0; k < microBatches; k++) {
                    h[k].setRequiresGradient(true);
                    Tensors.zeroGradient(h[k]);
                    try (AutogradScope scope = AutogradScope.open(m)) {
                        NDArray out;
                        if (pass == 0) {
                            NDArray[] p = new NDArray[6];
                            for (int i = 0; i < 6; i++) {
                                p[i] = params[i].data();
                            }
                            NDArray normed = LayerNorm.layerNorm(h[k], new Shape(width), p[0], p[1], 1e-5f).get(0);
                            NDArray a = Activation.gelu(Tensors.linear(normed, p[2], p[3], scope.manager()));
                            out = h[k].add(Tensors.linear(a, p[4], p[5], scope.manager()));
                        } else {
                            out = half.apply(scope, h[k]);
                        }
                        scope.backward(out.mul(upstream[k]).sum());
                        if (k == microBatches - 1) {
                            kept[0] = copy(out, m);
                        }
                    }
                }
                kept[1] = copy(Tensors.gradientOrZeros(h[microBatches - 1], m), m);
                for (int i = 0; i < 6; i++) {
                    kept[i + 2] = copy(params[i].gradient(m), m);
                }
                results[pass] = kept;
            }
            for (int i = 0; i < NAMES.length; i++) {
                assertClose(NAMES[i], results[1][i], results[0][i], 1e-5);
            }
        }
    }

    /**
     * bfloat16 (which DJL cannot create or convert to itself: every cast goes through mcore4j's
     * {@code DataTypes}): two micro-batches through the half in bfloat16 give the float32 run's output and
     * gradients to bfloat16 precision.
     */
    @Test
    void bfloat16MatchesFloat32ToItsPrecision() {
        try (NDManager m = Mcore4j.newRootManager()) {
            DeterministicRandom r = new DeterministicRandom(5);
            int width = 16;
            int ffn = 48;
            NDArray[] h = {r.normal(m, new Shape(4, 2, width), 0, 1, DataType.FLOAT32), r.normal(m, new Shape(4, 2, width), 0, 1, DataType.FLOAT32)};
            NDArray[] up = {r.normal(m, new Shape(4, 2, width), 0, 1, DataType.FLOAT32), r.normal(m, new Shape(4, 2, width), 0, 1, DataType.FLOAT32)};
            NDArray[] init = initialParameters(r, m, width, ffn);
            NDArray epsilon = m.newSubManager(Device.cpu()).create(1e-5);
            NDArray[] wide = run(DataType.FLOAT32, h, up, init, epsilon, m);
            NDArray[] narrow = run(DataType.BFLOAT16, h, up, init, epsilon, m);
            for (int i = 0; i < NAMES.length; i++) {
                double scale = wide[i].abs().max().getFloat();
                double diff = narrow[i].sub(wide[i]).abs().max().getFloat();
                org.junit.jupiter.api.Assertions.assertTrue(diff <= 3e-2 * scale,
                        NAMES[i] + ": bfloat16 differs from float32 by " + diff + " (largest magnitude " + scale + ")");
            }
        }
    }

    /**
     * FP8 (hybrid, delayed scaling): the half built on two {@link Fp8Linear}s multiplies through them, and gives what
     * the composed half gives with the same linears applied through autograd ({@link Fp8Linear#apply}), over two
     * micro-batches in bfloat16: the same output and gradients, and the same amaxes recorded by every cast (input,
     * weight and output gradient of both linears). The half's LayerNorm and GELU are libtorch's here, as the composed
     * half's, so the float8 operands are the same and the results agree to float32 summation order.
     */
    @Test
    void fp8HalfMatchesTheComposedHalfOnTheSameFp8Linears() {
        try (NDManager m = Mcore4j.newRootManager()) {
            DeterministicRandom r = new DeterministicRandom(7);
            int width = 16;
            int ffn = 48;
            Shape act = new Shape(8, 2, width); // 16 tokens: FP8 GEMMs take multiples of 16
            NDArray[] h = {r.normal(m, act, 0, 1, DataType.FLOAT32), r.normal(m, act, 0, 1, DataType.FLOAT32)};
            NDArray[] up = {r.normal(m, act, 0, 1, DataType.FLOAT32), r.normal(m, act, 0, 1, DataType.FLOAT32)};
            NDArray[] init = initialParameters(r, m, width, ffn);
            NDArray epsilon = m.newSubManager(Device.cpu()).create(1e-5);
            NDArray[][] results = new NDArray[2][];
            NDArray[] amaxes = new NDArray[2];
            for (int pass = 0; pass < 2; pass++) {
                try (Fp8Scaling scaling = new Fp8Scaling(Fp8Config.of(Fp8Format.HYBRID), m)) {
                    Fp8Linear fc1 = new Fp8Linear("fc1", scaling, m);
                    Fp8Linear fc2 = new Fp8Linear("fc2", scaling, m);
                    Parameter[] params = new Parameter[init.length];
                    for (int i = 0; i < init.length; i++) {
                        params[i] = Parameter.replicated("p" + i, DataTypes.toType(init[i], DataType.BFLOAT16, true));
                    }
                    MlpHalf half = new MlpHalf(epsilon, null, null, fc1, fc2, null, params);
                    NDArray[] kept = new NDArray[8];
                    NDArray[] inputs = new NDArray[h.length];
                    for (int k = 0; k < h.length; k++) {
                        inputs[k] = DataTypes.toType(h[k], DataType.BFLOAT16, true);
                        inputs[k].setRequiresGradient(true);
                        try (AutogradScope scope = AutogradScope.open(m)) {
                            NDArray out;
                            if (pass == 0) {
                                NDArray normed = LayerNorm.layerNorm(inputs[k], new Shape(width), params[0].data(),
                                        params[1].data(), 1e-5f).get(0);
                                NDArray a = Activation.gelu(fc1.apply(scope, normed, params[2], params[3].data()));
                                out = inputs[k].add(fc2.apply(scope, a, params[4], params[5].data()));
                            } else {
                                out = half.apply(scope, inputs[k]);
                            }
                            scope.backward(out.mul(DataTypes.toType(up[k], DataType.BFLOAT16, true)).sum());
                            kept[0] = widen(out, m);
                        }
                    }
                    kept[1] = widen(Tensors.gradientOrZeros(inputs[h.length - 1], m), m);
                    for (int i = 0; i < 6; i++) {
                        kept[i + 2] = widen(params[i].gradient(m), m);
                    }
                    results[pass] = kept;
                    amaxes[pass] = copy(scaling.history(), m);
                    fc1.close();
                    fc2.close();
                }
            }
            for (int i = 0; i < NAMES.length; i++) {
                assertClose(NAMES[i], results[1][i], results[0][i], 1e-6);
            }
            // six slots (input, weight, output gradient of fc1 and fc2), each cast at least once
            org.junit.jupiter.api.Assertions.assertEquals(new Shape(1, 6), amaxes[0].getShape());
            org.junit.jupiter.api.Assertions.assertTrue(amaxes[0].min().getFloat() > 0, "a slot recorded no amax: " + amaxes[0]);
            assertClose("amax history", amaxes[1], amaxes[0], 0);
        }
    }

    /**
     * Tensor parallelism without sequence parallelism: at 2 and 4 ranks, each with its column shard of fc1 and row
     * shard of fc2 (the LayerNorm and fc2's bias whole), two micro-batches give the one-rank half's output, input
     * gradient and LayerNorm and fc2-bias gradients on every rank, and each shard's gradient is its slice of the
     * one-rank gradients.
     */
    @org.junit.jupiter.params.ParameterizedTest(name = "TP{0}")
    @org.junit.jupiter.params.provider.ValueSource(ints = {2, 4})
    void tensorParallelShardsGiveTheOneRankHalf(int ranks) {
        int width = 16;
        int ffn = 48;
        io.mcore4j.parallel.inprocess.InJvmWorld.run(ranks, ctx -> {
            io.mcore4j.parallel.ProcessGroups groups = ctx.groups(
                    io.mcore4j.parallel.ParallelDims.builder(ranks).tensorParallel(ranks).build());
            io.mcore4j.parallel.Communicator tp = groups.tp();
            try (NDManager m = ctx.manager().newSubManager()) {
                DeterministicRandom r = new DeterministicRandom(11);
                NDArray[] h = {r.normal(m, new Shape(4, 2, width), 0, 1, DataType.FLOAT32),
                    r.normal(m, new Shape(4, 2, width), 0, 1, DataType.FLOAT32)};
                NDArray[] up = {r.normal(m, new Shape(4, 2, width), 0, 1, DataType.FLOAT32),
                    r.normal(m, new Shape(4, 2, width), 0, 1, DataType.FLOAT32)};
                NDArray[] init = initialParameters(r, m, width, ffn);
                NDArray epsilon = m.newSubManager(Device.cpu()).create(1e-5);
                NDArray[] serial = run(DataType.FLOAT32, h, up, init, epsilon, m);
                long shard = ffn / ranks;
                long from = shard * tp.rank();
                NDArray[] mine = init.clone();
                mine[2] = Tensors.narrow(init[2], 0, from, from + shard);
                mine[3] = Tensors.narrow(init[3], 0, from, from + shard);
                mine[4] = Tensors.narrow(init[4], 1, from, from + shard);
                Parameter[] params = new Parameter[6];
                for (int i = 0; i < 6; i++) {
                    params[i] = Parameter.replicated("p" + i, copy(mine[i], m));
                }
                MlpHalf half = new MlpHalf(epsilon, null, null, null, null, tp, params);
                NDArray out = null;
                NDArray input = null;
                for (int k = 0; k < h.length; k++) {
                    input = copy(h[k], m);
                    input.setRequiresGradient(true);
                    try (AutogradScope scope = AutogradScope.open(m)) {
                        NDArray y = half.apply(scope, input);
                        scope.backward(y.mul(up[k]).sum());
                        out = copy(y, m);
                    }
                }
                String rank = " on rank " + tp.rank() + " of " + ranks;
                assertClose("output" + rank, out, serial[0], 1e-5);
                assertClose("input gradient" + rank, Tensors.gradientOrZeros(input, m), serial[1], 1e-5);
                assertClose("LN weight" + rank, params[0].gradient(m), serial[2], 1e-5);
                assertClose("LN bias" + rank, params[1].gradient(m), serial[3], 1e-5);
                assertClose("fc1 weight shard" + rank, params[2].gradient(m), Tensors.narrow(serial[4], 0, from, from + shard), 1e-5);
                assertClose("fc1 bias shard" + rank, params[3].gradient(m), Tensors.narrow(serial[5], 0, from, from + shard), 1e-5);
                assertClose("fc2 weight shard" + rank, params[4].gradient(m), Tensors.narrow(serial[6], 1, from, from + shard), 1e-5);
                assertClose("fc2 bias" + rank, params[5].gradient(m), serial[7], 1e-5);
            }
            return null;
        });
    }

    /** Two micro-batches through the half in {@code dtype}: the last output and all gradients, as float32. */
    private static NDArray[] run(DataType dtype, NDArray[] h, NDArray[] up, NDArray[] init, NDArray epsilon, NDManager m) {
        Parameter[] params = new Parameter[init.length];
        for (int i = 0; i < init.length; i++) {
            params[i] = Parameter.replicated("p" + i, DataTypes.toType(init[i], dtype, true));
        }
        MlpHalf half = new MlpHalf(epsilon, null, null, null, null, null, params);
        NDArray[] kept = new NDArray[8];
        NDArray[] inputs = new NDArray[h.length];
        for (int k = 0; k < h.length; k++) {
            inputs[k] = DataTypes.toType(h[k], dtype, true);
            inputs[k].setRequiresGradient(true);
            try (AutogradScope scope = AutogradScope.open(m)) {
                NDArray out = half.apply(scope, inputs[k]);
                scope.backward(out.mul(DataTypes.toType(up[k], dtype, true)).sum());
                kept[0] = widen(out, m);
            }
        }
        kept[1] = widen(Tensors.gradientOrZeros(inputs[h.length - 1], m), m);
        for (int i = 0; i < 6; i++) {
            kept[i + 2] = widen(params[i].gradient(m), m);
        }
        return kept;
    }

    /** The half's six parameters in input order (LN weight, LN bias, fc1 weight, fc1 bias, fc2 weight, fc2 bias), float32. */
    private static NDArray[] initialParameters(DeterministicRandom r, NDManager m, int width, int ffn) {
        return new NDArray[] {r.normal(m, new Shape(width), 1, 0.1, DataType.FLOAT32),
            r.normal(m, new Shape(width), 0, 0.1, DataType.FLOAT32), r.normal(m, new Shape(ffn, width), 0, 0.2, DataType.FLOAT32),
            r.normal(m, new Shape(ffn), 0, 0.1, DataType.FLOAT32), r.normal(m, new Shape(width, ffn), 0, 0.2, DataType.FLOAT32),
            r.normal(m, new Shape(width), 0, 0.1, DataType.FLOAT32)};
    }

    private static NDArray widen(NDArray t, NDManager owner) {
        NDArray c = DataTypes.toType(t, DataType.FLOAT32, true);
        c.attach(owner);
        return c;
    }

    private static NDArray copy(NDArray t, NDManager owner) {
        NDArray c = t.duplicate();
        c.attach(owner);
        return c;
    }
}
