package io.mcore4j.moe;

import static org.junit.jupiter.api.Assertions.assertEquals;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;

import org.junit.jupiter.api.Test;

/**
 * Regression test for a DJL hazard: {@code NDArray.mul(Number)} wraps the number in a tensor backed
 * by a Java buffer and closes it right away, while autograd keeps that tensor for backward; after a
 * garbage collection the backward multiplies by whatever the freed memory holds (observed: 0, 9,
 * infinity). {@link io.mcore4j.core.Tensors#scale} uses a libtorch-allocated scalar; its gradient must survive
 * collections and allocation churn between forward and backward.
 */
class ScalarOperandTest {

    @Test
    void scaledGradientSurvivesGarbageCollection() {
        InJvmWorld.run(1, ctx -> {
            for (int iteration = 0; iteration < 20; iteration++) {
                try (AutogradScope scope = AutogradScope.open(ctx.manager())) {
                    NDManager s = scope.manager();
                    NDArray x = s.ones(new Shape(4));
                    x.setRequiresGradient(true);
                    NDArray y = Tensors.own(Tensors.scale(x, 0.1, s).sum(), s);
                    System.gc();
                    for (int k = 0; k < 50; k++) {
                        ByteBuffer junk = ByteBuffer.allocateDirect(64).order(ByteOrder.nativeOrder());
                        junk.putDouble(0, 7.0 + k);
                        try (NDArray t = s.create(new double[] {7.0 + k})) {
                            t.add(1).close();
                        }
                    }
                    scope.backward(y);
                    assertEquals(0.1f, Tensors.gradientOrNull(x, s).toFloatArray()[0], 1e-7f,
                            "gradient of x * 0.1 at iteration " + iteration);
                }
            }
            return null;
        });
    }
}
