package io.mcore4j.optimizer;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import ai.djl.nn.Activation;
import ai.djl.nn.core.Linear;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.autograd.Cast;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.random.DeterministicRandom;

import java.util.ArrayList;
import java.util.List;

/**
 * The test model: {@code fc2(gelu(fc1(x)))} with an MSE loss averaged over the batch, so that
 * averaging gradients over data-parallel ranks equals one rank with the whole batch. Weights are
 * drawn on the Java side from a fixed seed, identical on every rank and in every dtype (float16
 * runs round the same float32 values).
 */
final class TinyMlp {
    static final int IN = 6;
    static final int HIDDEN = 10;
    static final int OUT = 3;
    static final List<String> NAMES = List.of("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias");
    static final List<long[]> SHAPES = List.of(new long[] {HIDDEN, IN}, new long[] {HIDDEN},
            new long[] {OUT, HIDDEN}, new long[] {OUT});

    final List<Parameter> params;

    TinyMlp(NDManager manager, DataType dtype) {
        this(manager, dtype, initialValues());
    }

    TinyMlp(NDManager manager, DataType dtype, List<float[]> values) {
        params = new ArrayList<>();
        for (int i = 0; i < NAMES.size(); i++) {
            NDArray data = manager.create(values.get(i), new Shape(SHAPES.get(i)));
            if (dtype != DataType.FLOAT32) {
                NDArray cast = DataTypes.toType(data, dtype, false);
                data.close();
                data = cast;
            }
            params.add(Parameter.replicated(NAMES.get(i), data));
        }
    }

    static List<float[]> initialValues() {
        DeterministicRandom random = new DeterministicRandom(1234);
        List<float[]> out = new ArrayList<>();
        for (long[] shape : SHAPES) {
            int n = (int) new Shape(shape).size();
            out.add(random.normal(n, 0, 0.5));
        }
        return out;
    }

    /**
     * The loss of a batch, computed in float32, scaled by {@code scale} before backward.
     *
     * @return the unscaled loss value
     */
    double forwardBackward(NDManager parent, float[] x, float[] y, int rows, double scale) {
        try (AutogradScope scope = AutogradScope.open(parent)) {
            NDManager m = scope.manager();
            DataType dtype = DataTypes.of(params.get(0).data());
            NDArray input = DataTypes.toType(m.create(x, new Shape(rows, IN)), dtype, false);
            NDArray target = m.create(y, new Shape(rows, OUT));
            NDArray h = Activation.gelu(Linear.linear(input, params.get(0).data(), params.get(1).data()).get(0));
            NDArray out = Linear.linear(h, params.get(2).data(), params.get(3).data()).get(0);
            NDArray out32 = Cast.apply(scope, out, DataType.FLOAT32);
            NDArray loss = out32.sub(target).square().mean();
            double value = loss.getFloat();
            scope.backward(scale == 1 ? loss : loss.mul(scale));
            return value;
        }
    }

    /** Every parameter's values as float32 arrays. */
    List<float[]> values() {
        List<float[]> out = new ArrayList<>();
        for (Parameter p : params) {
            out.add(p.data().toType(DataType.FLOAT32, false).toFloatArray());
        }
        return out;
    }

    void close() {
        params.forEach(Parameter::close);
    }

    /** Inputs and targets of global step {@code step}: {@code rows} rows, the same on every rank. */
    static float[][] batch(int step, int rows) {
        DeterministicRandom random = new DeterministicRandom(9000 + step);
        float[] x = random.normal(rows * IN, 0, 1);
        float[] y = new float[rows * OUT];
        for (int r = 0; r < rows; r++) {
            for (int o = 0; o < OUT; o++) {
                double s = 0;
                for (int i = 0; i < IN; i++) {
                    s += Math.sin(0.7 * (o + 1) * x[r * IN + i] + i);
                }
                y[r * OUT + o] = (float) (0.3 * s);
            }
        }
        return new float[][] {x, y};
    }

    /** Rows {@code [from, from + count)} of a row-major batch array with {@code width} columns. */
    static float[] rows(float[] data, int width, int from, int count) {
        float[] out = new float[count * width];
        System.arraycopy(data, from * width, out, 0, out.length);
        return out;
    }
}
