package io.mcore4j.tensorparallel;

import static io.mcore4j.tensorparallel.Fixtures.assertClose;
import static io.mcore4j.tensorparallel.Fixtures.grad;
import static io.mcore4j.tensorparallel.Fixtures.leaf;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.TorchScriptModule;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * Each activation's fused form (the shipped TorchScript module, run by this CPU libtorch) against its
 * composed form: the same values and the same gradient for linear_fc1's output, in float32; GeGLU is the
 * tanh GELU's fused module on the gate times the up projection.
 */
class MlpActivationTest {

    @ParameterizedTest
    @EnumSource(MlpActivation.class)
    void fusedFormMatchesComposedForm(MlpActivation activation) {
        InJvmWorld.run(1, rank -> {
            NDManager m = rank.manager();
            TorchScriptModule fused = activation.fused();
            NDArray pre = Initializers.normal(1.5, 61).create(m, new Shape(5, 2, 6 * activation.fc1Factor()), DataType.FLOAT32);
            NDArray upstream = Initializers.normal(1.0, 62).create(m, new Shape(5, 2, 6), DataType.FLOAT32);
            NDArray[][] results = new NDArray[2][];
            TorchScriptModule[] forms = {null, fused};
            for (int i = 0; i < 2; i++) {
                NDArray x = leaf(pre, m);
                try (AutogradScope scope = AutogradScope.open(m)) {
                    NDArray y = activation.apply(scope, x, forms[i]);
                    scope.backward(y.mul(upstream).sum());
                    NDArray kept = y.duplicate();
                    kept.attach(m);
                    results[i] = new NDArray[] {kept, grad(x, m)};
                }
            }
            assertClose(activation + " values", results[1][0], results[0][0], 1e-6);
            assertClose(activation + " gradient", results[1][1], results[0][1], 1e-6);
            return null;
        });
    }

    @org.junit.jupiter.api.Test
    void gegluIsTheTanhGeluOfTheGateTimesUp() {
        InJvmWorld.run(1, rank -> {
            NDManager m = rank.manager();
            NDArray pre = Initializers.normal(1.5, 63).create(m, new Shape(5, 2, 12), DataType.FLOAT32);
            try (AutogradScope scope = AutogradScope.openNoGrad(m)) {
                NDArray geglu = MlpActivation.GEGLU_TANH.apply(scope, pre);
                NDArray gelu = MlpActivation.GELU_TANH.apply(scope, pre.get("..., :6"), MlpActivation.GELU_TANH.fused());
                assertClose("GeGLU", geglu, gelu.mul(pre.get("..., 6:")), 1e-6);
            }
            return null;
        });
    }
}
