package io.mcore4j.core.nn;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.core.TensorMemory;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;

import org.junit.jupiter.api.Test;

/**
 * {@link Parameter#clearGradient()} (a gradient set to none) against {@link Parameter#zeroGradient()}:
 * the gradient is gone, the values and their storage stay, and the next backwards accumulate
 * bitwise what they accumulate into zeros.
 */
class ParameterGradientTest {
    private static final float[] X = {0.5f, -2f, 4f, 0.125f};

    /** One backward of {@code sum(w * x * k)}: adds {@code k * x} to the gradient. */
    private static void backward(Parameter p, NDManager m, float k) {
        try (AutogradScope scope = AutogradScope.open(m)) {
            NDArray x = scope.manager().create(X).mul(k);
            scope.backward(p.data().mul(x).sum());
        }
    }

    private static float[] grad(Parameter p, NDManager m) {
        try (NDManager temp = m.newSubManager()) {
            return p.gradient(temp).toFloatArray();
        }
    }

    @Test
    void aClearedGradientIsNoneAndTheNextBackwardsSumAsIntoZeros() {
        try (NDManager m = Mcore4j.newRootManager()) {
            Parameter cleared = Parameter.replicated("w", m.create(new float[] {1, 2, 3, 4}));
            Parameter zeroed = Parameter.replicated("w", m.create(new float[] {1, 2, 3, 4}));
            for (int step = 0; step < 3; step++) {
                for (Parameter p : new Parameter[] {cleared, zeroed}) {
                    backward(p, m, 0.3f + step);
                    backward(p, m, -1.7f);
                }
                assertArrayEquals(grad(zeroed, m), grad(cleared, m), "step " + step);
                NDArray before = cleared.data();
                cleared.clearGradient();
                zeroed.zeroGradient();
                assertNull(cleared.gradient(m), "no gradient after clearGradient");
                assertNotSame(before, cleared.data(), "the leaf is replaced");
                assertTrue(before.isReleased(), "the old handle is closed");
                assertTrue(cleared.data().hasGradient(), "the new leaf requires grad");
                assertArrayEquals(new float[4], grad(zeroed, m));
            }
            cleared.close();
            zeroed.close();
        }
    }

    @Test
    void theStorageAndItsJavaBufferOutliveTheReplacedLeaf() {
        try (NDManager m = Mcore4j.newRootManager()) {
            // on the CPU a tensor made from Java data borrows a direct buffer that only its handle keeps alive
            Parameter p = Parameter.replicated("w", m.create(new float[] {1, 2, 3, 4}));
            assertTrue(TensorMemory.borrowsHostMemory(p.data()));
            NDArray view = Tensors.detach(p.data(), m); // as a checkpoint piece is taken
            backward(p, m, 1);
            p.clearGradient();
            assertTrue(TensorMemory.borrowsHostMemory(p.data()), "the buffer moves to the new leaf");
            Tensors.copyInto(p.data(), m.create(new float[] {7, 8, 9, 10}));
            assertArrayEquals(new float[] {7, 8, 9, 10}, view.toFloatArray(), "the view sees writes through the new leaf");
            for (int i = 0; i < 3; i++) {
                System.gc(); // a dropped buffer would be freed here and its memory reused below
                for (int j = 0; j < 64; j++) {
                    m.create(new float[1024]).close();
                }
            }
            assertArrayEquals(new float[] {7, 8, 9, 10}, p.data().toFloatArray());
            backward(p, m, 2);
            assertArrayEquals(new float[] {1, -4, 8, 0.25f}, grad(p, m));
            p.close();
        }
    }
}
