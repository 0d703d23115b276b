package io.mcore4j.models.transformer;

import static io.mcore4j.core.testing.NativeArrays.assertClose;

import ai.djl.Device;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import ai.djl.nn.Activation;
import ai.djl.nn.norm.LayerNorm;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.random.DeterministicRandom;

import org.junit.jupiter.api.Test;

/**
 * The second half of a GPT layer as one Function with a written-out backward ({@link MlpHalf}, its
 * composed bias gradients: the form every device without the CUDA kernel runs, and the reference of
 * that kernel's GPU check) against the same half through libtorch's autograd: the same output and the
 * same gradients for the input and all six parameters.
 */
class MlpHalfTest {

    @Test
    void writtenOutBackwardMatchesAutograd() {
        try (NDManager m = Mcore4j.newRootManager()) {
            DeterministicRandom r = new DeterministicRandom(3);
            int s = 5;
            int b = 2;
            int width = 16;
            int ffn = 48;
            NDArray h = r.normal(m, new Shape(s, b, width), 0, 1, DataType.FLOAT32);
            NDArray[] params = {r.normal(m, new Shape(width), 1, 0.1, DataType.FLOAT32), r.normal(m, new Shape(width), 0, 0.1, DataType.FLOAT32),
                r.normal(m, new Shape(ffn, width), 0, 0.2, DataType.FLOAT32), r.normal(m, new Shape(ffn), 0, 0.1, DataType.FLOAT32),
                r.normal(m, new Shape(width, ffn), 0, 0.2, DataType.FLOAT32), r.normal(m, new Shape(width), 0, 0.1, DataType.FLOAT32)};
            NDArray upstream = r.normal(m, new Shape(s, b, width), 0, 1, DataType.FLOAT32);
            NDArray epsilon = m.newSubManager(Device.cpu()).create(1e-5);
            NDArray[][] results = new NDArray[2][];
            for (int pass = 0; pass < 2; pass++) {
                h.setRequiresGradient(true);
                Tensors.zeroGradient(h);
                for (NDArray p : params) {
                    p.setRequiresGradient(true);
                    Tensors.zeroGradient(p);
                }
                try (AutogradScope scope = AutogradScope.open(m)) {
                    NDArray out;
                    if (pass == 0) {
                        NDArray normed = LayerNorm.layerNorm(h, new Shape(width), params[0], params[1], 1e-5f).get(0);
                        NDArray a = Activation.gelu(Tensors.linear(normed, params[2], params[3], scope.manager()));
                        out = h.add(Tensors.linear(a, params[4], params[5], scope.manager()));
                    } else {
                        out = scope.apply1(new MlpHalf(epsilon, null), h, params[0], params[1], params[2], params[3],
                                params[4], params[5]);
                    }
                    scope.backward(out.mul(upstream).sum());
                    NDArray[] kept = new NDArray[8];
                    kept[0] = copy(out, m);
                    kept[1] = copy(Tensors.gradientOrZeros(h, m), m);
                    for (int i = 0; i < 6; i++) {
                        kept[i + 2] = copy(Tensors.gradientOrZeros(params[i], m), m);
                    }
                    results[pass] = kept;
                }
            }
            String[] names = {"output", "input gradient", "LN weight", "LN bias", "fc1 weight", "fc1 bias", "fc2 weight",
                "fc2 bias"};
            for (int i = 0; i < names.length; i++) {
                assertClose(names[i], results[1][i], results[0][i], 1e-5);
            }
        }
    }

    private static NDArray copy(NDArray t, NDManager owner) {
        NDArray c = t.duplicate();
        c.attach(owner);
        return c;
    }
}
