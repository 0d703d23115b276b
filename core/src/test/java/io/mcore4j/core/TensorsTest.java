package io.mcore4j.core;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import io.mcore4j.core.autograd.AutogradScope;

import java.util.ArrayList;
import java.util.List;

import org.junit.jupiter.api.Test;

class TensorsTest {

    /**
     * The scalar operand of {@link Tensors#scale} must survive until backward: garbage collection
     * between forward and backward may not change the gradient (DJL's {@code mul(Number)} fails this).
     */
    @Test
    void scaleKeepsItsScalarAliveForBackward() {
        try (NDManager m = Mcore4j.newRootManager()) {
            NDArray x = m.create(new float[] {1, 2, 3});
            x.setRequiresGradient(true);
            for (int i = 0; i < 30; i++) {
                Tensors.zeroGradient(x);
                try (AutogradScope scope = AutogradScope.open(m)) {
                    NDArray y = Tensors.scale(x, 0.1, scope.manager());
                    List<byte[]> pressure = new ArrayList<>();
                    for (int k = 0; k < 64; k++) {
                        pressure.add(new byte[1 << 16]);
                        m.create(new float[1024]).close();
                    }
                    System.gc();
                    assertFalse(pressure.isEmpty());
                    scope.backward(y.sum());
                }
                assertArrayEquals(new float[] {0.1f, 0.1f, 0.1f}, x.getGradient().toFloatArray(), 0f, "iteration " + i);
            }
        }
    }

    @Test
    void requiresGradTellsLeavesNonLeavesAndConstantsApartWithoutChangingThem() {
        try (NDManager m = Mcore4j.newRootManager(); AutogradScope scope = AutogradScope.open(m)) {
            NDArray w = m.create(new float[] {1, 2});
            w.setRequiresGradient(true);
            NDArray constant = m.create(new float[] {3, 4});
            NDArray product = w.mul(constant);
            assertTrue(Tensors.requiresGrad(w));
            assertTrue(Tensors.requiresGrad(product));
            assertFalse(Tensors.requiresGrad(constant));
            assertFalse(Tensors.requiresGrad(constant), "probing must leave the constant a constant");
            assertFalse(Tensors.requiresGrad(m.create(new int[] {1})));
        }
    }
}
