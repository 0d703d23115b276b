package io.mcore4j.core;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.autograd.NoGrad;
import io.mcore4j.core.nn.Parameter;

import java.util.List;

import org.junit.jupiter.api.Test;

/**
 * ZeRO-3's two storage moves on a parameter, through DJL's libtorch: {@link TensorMemory#releaseStorage}
 * empties it, {@link TensorMemory#shareStorage} makes the same leaf a view of a flat buffer again, and a
 * backward through a graph built afterwards gives the gradient of the untouched parameter.
 */
class TensorMemoryShareTest {
    private static final float[] W = {1, -2, 3, 0.5f, 4, -1};
    private static final float[] X = {0.25f, 2, -3};

    private static float[] gradient(Parameter p, NDManager m) {
        try (AutogradScope scope = AutogradScope.open(m)) {
            NDArray x = scope.manager().create(X, new Shape(1, 3));
            scope.backward(x.matMul(p.data().transpose()).square().sum());
        }
        float[] g = p.gradient(m).toFloatArray();
        p.clearGradient();
        return g;
    }

    @Test
    void aReleasedParameterSharedBackIntoAFlatBufferTrainsAsBefore() {
        try (NDManager m = Mcore4j.newRootManager()) {
            Parameter p = Parameter.replicated("w", m.create(W, new Shape(2, 3)));
            float[] expected = gradient(p, m);
            NDArray leaf = p.data();
            try (NoGrad off = NoGrad.enter()) {
                TensorMemory.releaseStorage(List.of(leaf));
            }
            assertEquals(0, leaf.size(), "released");
            NDArray flat = m.zeros(new Shape(10));
            flat.set(new ai.djl.ndarray.index.NDIndex("2:8"), m.create(W));
            NDArray view = flat.get("2:8").reshape(2, 3);
            TensorMemory.shareStorage(List.of(leaf), List.of(view));
            assertArrayEquals(W, leaf.toFloatArray(), "the leaf shows the buffer's values");
            flat.set(new ai.djl.ndarray.index.NDIndex("2"), 1f);
            assertEquals(1f, leaf.toFloatArray()[0], "and shares its memory");
            flat.set(new ai.djl.ndarray.index.NDIndex("2"), W[0]);
            assertArrayEquals(expected, gradient(p, m), "the same gradient through the same leaf");
            assertThrows(IllegalArgumentException.class, () -> TensorMemory.shareStorage(List.of(leaf), List.of()));
        }
    }
}
