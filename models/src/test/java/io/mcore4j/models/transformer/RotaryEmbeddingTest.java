package io.mcore4j.models.transformer;

import static io.mcore4j.core.testing.NativeArrays.assertClose;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDArrays;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.random.DeterministicRandom;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import org.junit.jupiter.api.Test;

/**
 * The rotation through the shipped TorchScript module (run by this CPU libtorch), as a training
 * pass's Function with the inverse rotation as backward, against the rotation composed from DJL's
 * ops: same rotated queries and keys, and the same gradient for the fused projection they are
 * strided views of, with the values passed through beside them (grouped queries, positions 0..s-1
 * twice to use the kept tables, and the given positions of a context-parallel rank).
 */
class RotaryEmbeddingTest {

    @Test
    void moduleRotationAndItsInverseMatchTheComposedRotation() {
        int s = 6;
        int b = 2;
        int groups = 2;
        int perGroup = 2;
        int d = 8;
        InJvmWorld.run(1, rank -> {
            NDManager m = rank.manager();
            RotaryEmbedding composed = new RotaryEmbedding(d, 1.0, 10000);
            RotaryEmbedding fused = new RotaryEmbedding(d, 1.0, 10000, null, m);
            DeterministicRandom r = new DeterministicRandom(11);
            NDArray mixed = r.normal(m, new Shape(s, b, groups, perGroup + 2, d), 0, 1, DataType.FLOAT32);
            NDArray upstream = r.normal(m, new Shape(s, b, groups * perGroup + 2 * groups, d), 0, 1, DataType.FLOAT32);
            long[][] positionChoices = {null, null, {0, 1, 2, 9, 10, 11}};
            for (long[] positions : positionChoices) {
                NDArray[][] results = new NDArray[2][];
                RotaryEmbedding[] impls = {composed, fused};
                for (int i = 0; i < 2; i++) {
                    mixed.setRequiresGradient(true);
                    Tensors.zeroGradient(mixed);
                    try (AutogradScope scope = AutogradScope.open(m)) {
                        NDList parts = Tensors.split(mixed, new long[] {perGroup, 1, 1}, 3);
                        parts.attach(scope.manager());
                        NDArray query = parts.get(0).reshape(s, b, groups * perGroup, d);
                        NDArray key = parts.get(1).reshape(s, b, groups, d);
                        NDArray value = parts.get(2).reshape(s, b, groups, d);
                        NDArray[] rotated = impls[i].apply(scope, query, key, positions, value);
                        NDArray both = NDArrays.concat(new NDList(rotated[0], rotated[1], rotated[2]), 2);
                        scope.backward(both.mul(upstream).sum());
                        NDArray kept = both.duplicate();
                        kept.attach(m);
                        // a copy: the next pass zeroes and refills the same gradient tensor
                        NDArray grad = Tensors.gradientOrZeros(mixed, m).duplicate();
                        grad.attach(m);
                        results[i] = new NDArray[] {kept, grad};
                    }
                }
                String what = positions == null ? "positions 0..s-1" : "given positions";
                assertClose("rotated queries and keys, " + what, results[1][0], results[0][0], 1e-6);
                assertClose("gradient of the projection, " + what, results[1][1], results[0][1], 1e-6);
            }
            return null;
        });
    }
}
