package io.mcore4j.cuda;

import ai.djl.Device;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.kernel.MasterAdamKernel;

import java.util.ArrayList;
import java.util.List;
import java.util.Random;

/**
 * The GPU check of {@link CudaMasterAdam} (needs a CUDA device; CI has none):
 * {@code java -cp <jars>:<cuda test classes> io.mcore4j.cuda.CudaMasterAdamCheck}.
 *
 * <p>Random buckets (parameters of 1 to 9,000 elements, 70 of them in one bucket so that a bucket
 * takes two launches, one without a gradient) against the update computed in Java in float64 from
 * the same inputs: master weights and moments within 1e-5 of the magnitude of the terms each is a
 * sum of (float32 rounding), each model tensor equal to its master weights rounded to the model's
 * dtype, the sum of squares within 1e-6 relative; an uncounted bucket adds nothing while finite and
 * makes the sum NaN with an inf. For float16 and float32 gradients and model tensors, AdamW and Adam
 * with weight decay. Prints one line per check and
 * exits 1 on any failure.
 */
public final class CudaMasterAdamCheck {
    private final NDManager manager;
    private final MasterAdamKernel kernel;
    private final Random random = new Random(7);
    private final GpuCheck result = new GpuCheck("CudaMasterAdamCheck");

    private CudaMasterAdamCheck(NDManager manager, MasterAdamKernel kernel) {
        this.manager = manager;
        this.kernel = kernel;
    }

    /** @param args none */
    public static void main(String[] args) {
        Device gpu = Device.gpu();
        try (NDManager manager = NDManager.newBaseManager(gpu)) {
            MasterAdamKernel kernel = GpuCheck.kernel(MasterAdamKernel.class, gpu);
            CudaMasterAdamCheck check = new CudaMasterAdamCheck(manager, kernel);
            check.run(DataType.FLOAT16, DataType.FLOAT16, true, 0.1);
            check.run(DataType.FLOAT16, DataType.FLOAT16, false, 0.01);
            check.run(DataType.FLOAT32, DataType.FLOAT16, true, 0.0);
            check.run(DataType.FLOAT32, DataType.FLOAT32, true, 0.1);
            check.nonFinite();
            check.result.exit();
        }
    }

    /** Host copies of one bucket's inputs, and the device bucket made from them. */
    private final class Case {
        final int[] sizes;
        final long length;
        final float[][] grads;
        final float[] master;
        final float[] expAvg;
        final float[] expAvgSq;
        final MasterAdamKernel.Bucket bucket;
        final List<NDArray> gradTensors = new ArrayList<>();

        Case(int count, DataType gradDtype, DataType paramDtype, boolean counts) {
            sizes = new int[count];
            long n = 0;
            for (int i = 0; i < count; i++) {
                sizes[i] = i % 10 == 3 ? 9000 : 1 + random.nextInt(5000);
                n += sizes[i];
            }
            length = n;
            master = values((int) n, 1);
            expAvg = values((int) n, 0.01f);
            expAvgSq = abs(values((int) n, 0.001f));
            grads = new float[count][];
            List<MasterAdamKernel.Segment> segments = new ArrayList<>();
            long offset = 0;
            for (int i = 0; i < count; i++) {
                NDArray grad = null;
                if (i != 5) {
                    // values a float16 holds exactly, so that the reference sees what the kernel reads
                    NDArray g = manager.create(values(sizes[i], 300)).toType(gradDtype, false);
                    grads[i] = g.toType(DataType.FLOAT32, false).toFloatArray();
                    grad = g;
                }
                NDArray param = manager.zeros(new Shape(sizes[i]), paramDtype);
                gradTensors.add(grad);
                segments.add(new MasterAdamKernel.Segment(param, offset, sizes[i]));
                offset += sizes[i];
            }
            bucket = new MasterAdamKernel.Bucket(manager.create(master), manager.create(expAvg), manager.create(expAvgSq),
                    segments, counts, true);
        }

        double sumOfSquares() {
            double sum = 0;
            for (float[] g : grads) {
                if (g != null) {
                    for (float v : g) {
                        sum += (double) v * v;
                    }
                }
            }
            return sum;
        }
    }

    private void run(DataType gradDtype, DataType paramDtype, boolean decoupled, double weightDecay) {
        String name = "grad " + gradDtype + ", model " + paramDtype + (decoupled ? ", AdamW" : ", Adam") + ", decay " + weightDecay;
        Case c = new Case(70, gradDtype, paramDtype, true);
        MasterAdamKernel.Gradients grads = kernel.bind(List.of(c.bucket)).gradients(List.of(c.gradTensors));
        double sum = grads.sumOfSquares(manager).getDouble();
        double expectedSum = c.sumOfSquares();
        report(name + ": sum of squares " + sum + " vs " + expectedSum, Math.abs(sum - expectedSum) <= 1e-6 * expectedSum);
        MasterAdamKernel.Step step = new MasterAdamKernel.Step(3e-3, 0.9, 0.95, 1e-8, weightDecay, decoupled, 3, 1024.0 / 0.5);
        grads.step(step);
        double[] expected = reference(c, step);
        int n = (int) c.length;
        float[] master = c.bucket.master().toFloatArray();
        float[] m = c.bucket.expAvg().toFloatArray();
        float[] v = c.bucket.expAvgSq().toFloatArray();
        double worst = 0;
        for (int j = 0; j < n; j++) {
            // errors relative to the magnitude of the terms each value is a sum of (float32 rounding of each)
            worst = Math.max(worst, Math.abs(master[j] - expected[j]) / expected[3 * n + j]);
            worst = Math.max(worst, Math.abs(m[j] - expected[n + j]) / expected[4 * n + j]);
            worst = Math.max(worst, Math.abs(v[j] - expected[2 * n + j]) / expected[5 * n + j]);
        }
        report(name + ": master and moments, worst error relative to their terms " + worst, worst <= 1e-5);
        int mismatched = 0;
        long offset = 0;
        for (int i = 0; i < c.sizes.length; i++) {
            MasterAdamKernel.Segment s = c.bucket.segments().get(i);
            float[] written = s.param().toType(DataType.FLOAT32, false).toFloatArray();
            float[] rounded = manager.create(java.util.Arrays.copyOfRange(master, (int) offset, (int) offset + c.sizes[i]))
                    .toType(paramDtype, false).toType(DataType.FLOAT32, false).toFloatArray();
            for (int k = 0; k < written.length; k++) {
                if (Float.floatToIntBits(written[k]) != Float.floatToIntBits(rounded[k])) {
                    mismatched++;
                }
            }
            offset += c.sizes[i];
        }
        report(name + ": model tensors = master rounded to " + paramDtype + " (" + mismatched + " differ)", mismatched == 0);
    }

    /**
     * {master, exp_avg, exp_avg_sq} after one step, in float64 (torch's fused Adam order of
     * operations), then for each the sum of the magnitudes of its terms.
     */
    private static double[] reference(Case c, MasterAdamKernel.Step s) {
        int n = (int) c.length;
        double[] out = new double[6 * n];
        double bc1 = 1 - Math.pow(s.beta1(), s.step());
        double bc2 = 1 - Math.pow(s.beta2(), s.step());
        double wd = s.weightDecay();
        int j = 0;
        for (int i = 0; i < c.sizes.length; i++) {
            for (int k = 0; k < c.sizes[i]; k++, j++) {
                double g = c.grads[i] == null ? 0 : c.grads[i][k] / s.gradDivisor();
                double p = c.master[j];
                if (wd != 0) {
                    if (s.decoupled()) {
                        p -= s.lr() * wd * p;
                    } else {
                        g += p * wd;
                    }
                }
                double m = s.beta1() * c.expAvg[j] + (1 - s.beta1()) * g;
                double v = s.beta2() * c.expAvgSq[j] + (1 - s.beta2()) * g * g;
                double update = (s.lr() / bc1) * m / (Math.sqrt(v) / Math.sqrt(bc2) + s.eps());
                out[j] = p - update;
                out[n + j] = m;
                out[2 * n + j] = v;
                out[3 * n + j] = Math.abs(p) + Math.abs(update) + 1e-30;
                out[4 * n + j] = Math.abs(s.beta1() * c.expAvg[j]) + Math.abs((1 - s.beta1()) * g) + 1e-30;
                out[5 * n + j] = s.beta2() * c.expAvgSq[j] + (1 - s.beta2()) * g * g + 1e-30;
            }
        }
        return out;
    }

    private void nonFinite() {
        Case counted = new Case(3, DataType.FLOAT16, DataType.FLOAT16, true);
        Case other = new Case(3, DataType.FLOAT16, DataType.FLOAT16, false);
        MasterAdamKernel.Bound bound = kernel.bind(List.of(counted.bucket, other.bucket));
        List<List<NDArray>> grads = List.of(counted.gradTensors, other.gradTensors);
        double finite = bound.gradients(grads).sumOfSquares(manager).getDouble();
        report("uncounted finite bucket adds nothing: " + finite + " vs " + counted.sumOfSquares(),
                Math.abs(finite - counted.sumOfSquares()) <= 1e-6 * counted.sumOfSquares());
        other.gradTensors.get(1).set(new ai.djl.ndarray.index.NDIndex("7"), Float.POSITIVE_INFINITY);
        double sum = bound.gradients(grads).sumOfSquares(manager).getDouble();
        report("inf in an uncounted bucket: sum " + sum, Double.isNaN(sum));
    }

    private float[] values(int n, float scale) {
        float[] v = new float[n];
        for (int i = 0; i < n; i++) {
            v[i] = (float) (random.nextGaussian() * scale);
        }
        return v;
    }

    private static float[] abs(float[] v) {
        for (int i = 0; i < v.length; i++) {
            v[i] = Math.abs(v[i]);
        }
        return v;
    }

    private void report(String what, boolean ok) {
        result.expect(ok, what);
    }
}
