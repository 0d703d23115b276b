package io.mcore4j.moe;

import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.random.DeterministicRandom;
import io.mcore4j.core.testing.NativeArrays;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmFabric;

import java.time.Duration;

/** Helpers shared by this module's tests. */
final class Fixtures {
    private Fixtures() {}

    /** Groups of a private world of one rank (an EP1/TP1 reference inside a multi-rank test). */
    static ProcessGroups soloGroups() {
        InJvmFabric fabric = new InJvmFabric(1, Duration.ofSeconds(30));
        return ProcessGroups.create(ParallelDims.builder(1).build(), fabric.backend(0));
    }

    /** Normal samples drawn on the Java side from {@code seed}, owned by {@code m}. */
    static NDArray normal(NDManager m, long seed, double std, long... shape) {
        return new DeterministicRandom(seed).normal(m, new Shape(shape), 0, std, DataType.FLOAT32);
    }

    /** A leaf that requires grad: a copy of {@code source} owned by {@code owner}. */
    static NDArray leaf(NDArray source, NDManager owner) {
        NDArray copy = source.duplicate();
        copy.attach(owner);
        copy.setRequiresGradient(true);
        return copy;
    }

    /** Rows {@code [index * len, (index + 1) * len)} of dim 0 of {@code full}, a copy owned by {@code owner}. */
    static NDArray chunk(NDArray full, int parts, int index, NDManager owner) {
        long len = full.getShape().get(0) / parts;
        NDArray c = full.get((index * len) + ":" + ((index + 1) * len)).duplicate();
        c.attach(owner);
        return c;
    }

    /** The gradient of a leaf, failing if none was written. */
    static NDArray grad(NDArray leaf, NDManager owner) {
        NDArray g = Tensors.gradientOrNull(leaf, owner);
        assertTrue(g != null, "no gradient reached a tensor of shape " + leaf.getShape());
        return g;
    }

    /** The gradient of a leaf or zeros of its shape. */
    static NDArray gradOrZeros(NDArray leaf, NDManager owner) {
        return Tensors.gradientOrZeros(leaf, owner);
    }

    /** Asserts agreement within {@code tolerance}, compared in float32. */
    static void assertClose(String what, NDArray actual, NDArray expected, double tolerance) {
        NDArray a = actual.toType(DataType.FLOAT32, true);
        NDArray e = expected.toType(DataType.FLOAT32, true);
        try {
            NativeArrays.assertClose(what, a, e, tolerance);
        } finally {
            a.close();
            e.close();
        }
    }

    /** Largest absolute value of a tensor. */
    static double maxAbs(NDArray x) {
        try (NDManager temp = x.getManager().newSubManager()) {
            NDArray a = x.toType(DataType.FLOAT32, true);
            a.attach(temp);
            NDArray r = a.abs().max();
            r.attach(temp);
            return r.getFloat();
        }
    }
}
