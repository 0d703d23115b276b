package io.mcore4j.core;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.Device;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.autograd.AutogradScope;

import java.util.ArrayList;
import java.util.List;

import org.junit.jupiter.api.Test;

class TensorsTest {

    /** A host scalar divides and multiplies as the device scalar does, float32 and bfloat16, and stays on the host. */
    @Test
    void aHostScalarOperandGivesTheDeviceScalarsResult() {
        try (NDManager m = Mcore4j.newRootManager()) {
            NDArray f = m.create(new float[] {1, 2, 3, 1e-3f, -7.25f, 3e5f});
            NDArray b = DataTypes.toType(f, DataType.BFLOAT16, false);
            for (NDArray x : new NDArray[] {f, b}) {
                NDArray host = Tensors.hostScalar(3, x, m);
                assertTrue(host.getDevice().equals(Device.cpu()));
                assertEquals(0, host.getShape().dimension());
                NDArray viaHost = x.duplicate().divi(host);
                NDArray viaDevice = x.duplicate().divi(Tensors.scalar(3, x, m));
                assertEquals(DataTypes.of(x), DataTypes.of(viaHost));
                assertArrayEquals(DataTypes.toType(viaDevice, DataType.FLOAT32, false).toFloatArray(),
                        DataTypes.toType(viaHost, DataType.FLOAT32, false).toFloatArray(), 0f);
                NDArray product = x.mul(Tensors.hostScalar(0.5, x, m));
                assertArrayEquals(DataTypes.toType(x.mul(Tensors.scalar(0.5, x, m)), DataType.FLOAT32,
                        false).toFloatArray(), DataTypes.toType(product, DataType.FLOAT32, false)
                        .toFloatArray(), 0f);
            }
        }
    }

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

    /** The flattened product gives libtorch's composed {@code x·wᵀ + b} and its gradients, for 3-d input with and without bias. */
    @Test
    void linearMatchesTheComposedProductAndItsGradients() {
        for (boolean withBias : new boolean[] {true, false}) {
            try (NDManager m = Mcore4j.newRootManager()) {
                NDArray x = m.randomNormal(new ai.djl.ndarray.types.Shape(3, 2, 5));
                NDArray w = m.randomNormal(new ai.djl.ndarray.types.Shape(4, 5));
                NDArray b = withBias ? m.randomNormal(new ai.djl.ndarray.types.Shape(4)) : null;
                NDArray upstream = m.randomNormal(new ai.djl.ndarray.types.Shape(3, 2, 4));
                float[][] fused = run(m, x, w, b, upstream, true);
                float[][] composed = run(m, x, w, b, upstream, false);
                for (int i = 0; i < fused.length; i++) {
                    assertArrayEquals(composed[i], fused[i], 1e-5f, "bias " + withBias + ", tensor " + i);
                }
            }
        }
    }

    /** {output, dx, dw, db} of one linear. */
    private static float[][] run(NDManager m, NDArray x0, NDArray w0, NDArray b0, NDArray upstream, boolean fused) {
        try (AutogradScope scope = AutogradScope.open(m)) {
            NDManager s = scope.manager();
            NDArray x = Tensors.detach(x0, s);
            NDArray w = Tensors.detach(w0, s);
            NDArray b = b0 == null ? null : Tensors.detach(b0, s);
            for (NDArray t : new NDArray[] {x, w, b}) {
                if (t != null) {
                    t.setRequiresGradient(true);
                }
            }
            NDArray y = fused ? Tensors.linear(x, w, b, s) : x.matMul(w.transpose());
            if (!fused && b != null) {
                y = y.add(b);
            }
            scope.backward(new NDArray[] {y}, new NDArray[] {upstream});
            return new float[][] {y.toFloatArray(), x.getGradient().toFloatArray(), w.getGradient().toFloatArray(),
                    b == null ? new float[0] : b.getGradient().toFloatArray()};
        }
    }
}
