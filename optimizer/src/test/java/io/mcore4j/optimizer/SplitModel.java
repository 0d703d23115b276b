package io.mcore4j.optimizer;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.random.DeterministicRandom;
import io.mcore4j.parallel.ProcessGroups;

import java.util.ArrayList;
import java.util.List;

/**
 * A two-stage model described serially (weights and known gradients as Java arrays) and built per
 * rank at TP2 x PP2: split weights hold the rank's slice of the serial weight, replicated ones the
 * whole weight, and the tied embedding lives on both stages.
 */
final class SplitModel {
    static final int TP = 2;

    /**
     * One serial weight.
     *
     * @param splitDim dim split over TP, or -1 for a replicated weight
     * @param stage pipeline stage holding it, or -1 for the tied embedding held by both
     */
    record Spec(String name, long[] shape, int splitDim, Parameter.Kind kind, int stage) {
        int numel() {
            return (int) new Shape(shape).size();
        }
    }

    static final List<Spec> SPECS = List.of(
            new Spec("embedding.weight", new long[] {10, 6}, 0, Parameter.Kind.DENSE, -1),
            new Spec("stage0.fc.weight", new long[] {4, 6}, 0, Parameter.Kind.DENSE, 0),
            new Spec("stage0.fc.bias", new long[] {4}, 0, Parameter.Kind.DENSE, 0),
            new Spec("stage0.norm.weight", new long[] {6}, -1, Parameter.Kind.DENSE, 0),
            new Spec("stage1.fc.weight", new long[] {6, 4}, 1, Parameter.Kind.DENSE, 1),
            new Spec("stage1.fc.bias", new long[] {6}, -1, Parameter.Kind.DENSE, 1),
            new Spec("stage1.norm.weight", new long[] {6}, -1, Parameter.Kind.SEQUENCE_PARALLEL, 1));

    /** Serial values of a spec from a seed: weights with one seed, gradients with another. */
    static float[] serial(Spec spec, long seed) {
        return new DeterministicRandom(seed * 31 + spec.name().hashCode()).normal(spec.numel(), 0, 0.3);
    }

    static float[] weight(Spec spec) {
        return serial(spec, 1);
    }

    static float[] gradient(Spec spec) {
        return serial(spec, 2);
    }

    /** The L2 norm of all serial gradients, the tied embedding once, in float64. */
    static double serialNorm() {
        double sum = 0;
        for (Spec spec : SPECS) {
            for (float g : gradient(spec)) {
                sum += (double) g * g;
            }
        }
        return Math.sqrt(sum);
    }

    /** This rank's parameters, in {@link #SPECS} order (those of its stage). */
    static List<Parameter> build(ProcessGroups groups, NDManager manager) {
        List<Parameter> out = new ArrayList<>();
        for (Spec spec : SPECS) {
            if (spec.stage() == -1 || spec.stage() == groups.pipelineRank()) {
                int tp = groups.tensorParallelRank();
                float[] local = local(spec, weight(spec), tp);
                Parameter.Partition partition = spec.splitDim() < 0 ? Parameter.Partition.NONE
                        : new Parameter.Partition(spec.splitDim(), tp, TP);
                out.add(new Parameter(spec.name(), manager.create(local, new Shape(localShape(spec))), partition, spec.kind()));
            }
        }
        return out;
    }

    static Spec spec(Parameter p) {
        for (Spec s : SPECS) {
            if (s.name().equals(p.name())) {
                return s;
            }
        }
        throw new IllegalArgumentException(p.name());
    }

    static long[] localShape(Spec spec) {
        long[] shape = spec.shape().clone();
        if (spec.splitDim() >= 0) {
            shape[spec.splitDim()] /= TP;
        }
        return shape;
    }

    /** Rank {@code tp}'s slice of a serial row-major array (the whole array for a replicated spec). */
    static float[] local(Spec spec, float[] serial, int tp) {
        if (spec.splitDim() < 0) {
            return serial.clone();
        }
        long[] shape = spec.shape();
        int dim = spec.splitDim();
        long outer = 1;
        for (int d = 0; d < dim; d++) {
            outer *= shape[d];
        }
        long inner = 1;
        for (int d = dim + 1; d < shape.length; d++) {
            inner *= shape[d];
        }
        long part = shape[dim] / TP;
        float[] out = new float[(int) (outer * part * inner)];
        int k = 0;
        for (long o = 0; o < outer; o++) {
            for (long j = tp * part; j < (tp + 1) * part; j++) {
                for (long i = 0; i < inner; i++) {
                    out[k++] = serial[(int) ((o * shape[dim] + j) * inner + i)];
                }
            }
        }
        return out;
    }

    /** Accumulates {@code values} into {@code p}'s {@code .grad} through autograd: backward of {@code sum(values * p)}. */
    static void addGradient(Parameter p, float[] values, NDManager manager) {
        try (AutogradScope scope = AutogradScope.open(manager)) {
            NDArray c = scope.manager().create(values, p.data().getShape());
            scope.backward(c.mul(p.data()).sum());
        }
    }

    static float[] plus(float[] a, float[] b, double s) {
        float[] out = new float[a.length];
        for (int i = 0; i < a.length; i++) {
            out[i] = (float) (a[i] + s * b[i]);
        }
        return out;
    }
}
